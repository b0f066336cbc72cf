package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestAnInstanceOnStandbyIsKept: an operator puts an instance on standby
// (EnterStandby, lowering the desired capacity) to look at it, and means
// to put it back. It stays one of the NodeSet's machines, running (its
// Node is neither deleted nor drained), and the group is not raised for
// it: no extra instance is launched. When nodeset does terminate it (its
// Node deleted), the desired capacity, which does not count it, is left
// as it is: lowering it would make Auto Scaling pick another instance.
func TestAnInstanceOnStandbyIsKept(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 3, MaxReplicas: 3, TemplateHash: "h1"}
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Len(t, status.Machines, 3)
	standby := status.Machines[0].ProviderID
	id, err := awscloud.InstanceID(standby)
	require.NoError(t, err)
	_, err = w.asg.(*autoscaling.Client).EnterStandby(ctx, &autoscaling.EnterStandbyInput{AutoScalingGroupName: aws.String(group.Name),
		InstanceIds: []string{id}, ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	require.EqualValues(t, 2, aws.ToInt32(w.describe(t, group.Name).DesiredCapacity))

	for _, look := range []string{"shared look", "fresh look"} {
		d.invalidate(region, class.Credentials)
		if look == "fresh look" {
			d.mu.Lock()
			delete(d.templates, group.Name) // as after a restart
			d.mu.Unlock()
		}
		status, err = d.EnsureGroup(ctx, group)
		require.NoError(t, err)
		assert.Len(t, status.Machines, 3, "%s: no instance launched for the one on standby", look)
		for _, m := range status.Machines {
			assert.Equal(t, drivers.MachineRunning, m.State, "%s: %s is kept", look, m.ProviderID)
		}
		assert.EqualValues(t, 2, aws.ToInt32(w.describe(t, group.Name).DesiredCapacity), "%s: not raised", look)
	}
	fresh, err := d.DescribeGroup(ctx, class, group.Name)
	require.NoError(t, err)
	for _, m := range fresh.Machines {
		assert.Equal(t, drivers.MachineRunning, m.State, "the fresh look before a Node is taken away keeps %s", m.ProviderID)
	}

	require.NoError(t, d.TerminateMachine(ctx, class, group.Name, standby))
	g := w.describe(t, group.Name)
	assert.EqualValues(t, 2, aws.ToInt32(g.DesiredCapacity), "the desired capacity never counted it")
	inService := 0
	for _, i := range g.Instances {
		if i.LifecycleState == asgtypes.LifecycleStateInService {
			inService++
		}
	}
	assert.Equal(t, 2, inService, "no other instance goes")
}
