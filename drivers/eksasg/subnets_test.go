package eksasg

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// orderedAutoScaling records the writes that reach moto, in order.
type orderedAutoScaling struct {
	*cutAutoScaling
	mu     sync.Mutex
	writes []string
}

func (o *orderedAutoScaling) record(what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes = append(o.writes, what)
}

func (o *orderedAutoScaling) SuspendProcesses(ctx context.Context, in *autoscaling.SuspendProcessesInput, opts ...func(*autoscaling.Options)) (*autoscaling.SuspendProcessesOutput, error) {
	out, err := o.cutAutoScaling.SuspendProcesses(ctx, in, opts...)
	if err == nil {
		o.record("SuspendProcesses " + strings.Join(in.ScalingProcesses, ","))
	}
	return out, err
}

func (o *orderedAutoScaling) UpdateAutoScalingGroup(ctx context.Context, in *autoscaling.UpdateAutoScalingGroupInput, opts ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error) {
	out, err := o.cutAutoScaling.UpdateAutoScalingGroup(ctx, in, opts...)
	if err == nil {
		o.record("UpdateAutoScalingGroup " + aws.ToString(in.VPCZoneIdentifier))
	}
	return out, err
}

// TestASubnetIsRemovedFromTheGroupOnlyWithAZRebalanceSuspended: Auto
// Scaling moves instances out of a zone the group no longer names by its
// AZRebalance process, terminating them without a drain. The subnets of
// an existing group are changed only once AZRebalance is suspended on it:
// a group found with it resumed (by hand) gets no subnet change while the
// suspension fails, and the suspension comes first otherwise. The
// instances in the removed subnet stay in the group: they go as nodeset's
// rollout of the class change drains and replaces them.
func TestASubnetIsRemovedFromTheGroupOnlyWithAZRebalanceSuspended(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	rec := &orderedAutoScaling{cutAutoScaling: &cutAutoScaling{}}
	d := New(Options{Cluster: "prod", Clients: func(ctx context.Context, region string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		asg, ec2c, err := real(ctx, region, creds)
		rec.AutoScaling = asg
		return rec, ec2c, err
	}})
	class := w.class()
	second := w.secondSubnet(t)
	class.Spec.EKSAutoscalingGroup.SubnetIDs = []string{w.subnet, second}
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 2, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	before := w.describe(t, group.Name).Instances
	require.Len(t, before, 2)

	_, err = w.asg.(*autoscaling.Client).ResumeProcesses(ctx, &autoscaling.ResumeProcessesInput{AutoScalingGroupName: aws.String(group.Name),
		ScalingProcesses: []string{"AZRebalance"}})
	require.NoError(t, err)
	narrowed := w.class()
	narrowed.Spec.EKSAutoscalingGroup.SubnetIDs = []string{w.subnet}
	group.Class, group.TemplateHash = narrowed, "h2"
	rec.cut = map[string]bool{"SuspendProcesses": true}
	rec.writes = nil
	_, err = d.EnsureGroup(ctx, group)
	require.Error(t, err, "AZRebalance could not be suspended")
	assert.Empty(t, rec.writes, "no subnet taken from a group that may rebalance")
	assert.Equal(t, w.subnet+","+second, aws.ToString(w.describe(t, group.Name).VPCZoneIdentifier))

	rec.cut = nil
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, []string{"SuspendProcesses AZRebalance", "UpdateAutoScalingGroup " + w.subnet}, rec.writes, "suspended first")
	g := w.describe(t, group.Name)
	assert.Equal(t, w.subnet, aws.ToString(g.VPCZoneIdentifier))
	var ids, kept []string
	for _, i := range before {
		ids = append(ids, aws.ToString(i.InstanceId))
	}
	for _, i := range g.Instances {
		kept = append(kept, aws.ToString(i.InstanceId))
	}
	assert.ElementsMatch(t, ids, kept, "no instance taken by the change: nodeset drains and replaces them")
}
