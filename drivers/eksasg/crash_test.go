package eksasg

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// cutAutoScaling passes calls to moto, except that the calls named in cut
// fail without reaching it: the node controller died (or the call failed
// for good) at that point.
type cutAutoScaling struct {
	awscloud.AutoScaling
	cut map[string]bool
}

func (c *cutAutoScaling) SuspendProcesses(ctx context.Context, in *autoscaling.SuspendProcessesInput, opts ...func(*autoscaling.Options)) (*autoscaling.SuspendProcessesOutput, error) {
	if c.cut["SuspendProcesses"] {
		return nil, errors.New("the node controller died here")
	}
	return c.AutoScaling.SuspendProcesses(ctx, in, opts...)
}

// TestAZRebalanceIsSuspendedWhateverDiedWhen: the group is made, and the
// node controller dies (or SuspendProcesses fails) before AZRebalance is
// suspended. The next EnsureGroup, in a new process, finds the group and
// suspends it then: AWS never terminates an undrained instance to
// rebalance zones. The same holds when someone resumed it by hand.
func TestAZRebalanceIsSuspendedWhateverDiedWhen(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	cut := &cutAutoScaling{cut: map[string]bool{"SuspendProcesses": true}}
	clients := func(ctx context.Context, region string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		asg, ec2c, err := real(ctx, region, creds)
		cut.AutoScaling = asg
		return cut, ec2c, err
	}
	class := w.class()
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := New(Options{Cluster: "prod", Clients: clients}).EnsureGroup(ctx, group)
	require.Error(t, err, "died before suspending AZRebalance")
	assert.NotContains(t, w.suspended(t, group.Name), "AZRebalance")

	cut.cut = nil
	restarted := New(Options{Cluster: "prod", Clients: clients})
	_, err = restarted.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, w.suspended(t, group.Name), "AZRebalance", "the restarted node controller suspends it")

	t.Log("resumed by hand: suspended again, also when nothing else changed")
	_, err = w.asg.(*autoscaling.Client).ResumeProcesses(ctx, &autoscaling.ResumeProcessesInput{AutoScalingGroupName: aws.String(group.Name),
		ScalingProcesses: []string{"AZRebalance"}})
	require.NoError(t, err)
	require.NotContains(t, w.suspended(t, group.Name), "AZRebalance")
	restarted.invalidate(region, class.Credentials) // a poll interval later
	_, err = restarted.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, w.suspended(t, group.Name), "AZRebalance")
}

// suspended are the processes suspended on the group.
func (w *world) suspended(t *testing.T, name string) []string {
	t.Helper()
	g, err := awscloud.FindGroup(context.Background(), w.asg, name)
	require.NoError(t, err)
	var out []string
	for _, p := range g.SuspendedProcesses {
		out = append(out, aws.ToString(p.ProcessName))
	}
	return out
}
