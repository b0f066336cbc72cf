package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestAnInstanceOnStandbyInTheNodeGroupIsKept: a managed node group is an
// Auto Scaling group underneath, and an operator may put one of its
// instances on standby (EnterStandby on that group) to look at it. It is
// not leaving: it stays one of the NodeSet's machines, running, so its
// Node is neither drained nor deleted, and the node group is not raised
// for it (EnterStandby lowered the desired size, which EKS reports), so no
// replacement is launched. Terminating it lowers nothing: the desired size
// does not count it.
func TestAnInstanceOnStandbyInTheNodeGroupIsKept(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	class := w.class()
	status, err := d.DescribeGroup(ctx, class, "ng")
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	standby := status.Machines[0].ProviderID
	id, err := awscloud.InstanceID(standby)
	require.NoError(t, err)
	_, err = w.api.AutoScaling.(*autoscaling.Client).EnterStandby(ctx, &autoscaling.EnterStandbyInput{AutoScalingGroupName: aws.String("ng-asg"),
		InstanceIds: []string{id}, ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	fake.groups["ng"].ScalingConfig.DesiredSize = aws.Int32(1) // EKS reports the Auto Scaling group's desired capacity

	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: class, Replicas: 2, MaxReplicas: 5, TemplateHash: "h2"}
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	for _, m := range status.Machines {
		assert.Equal(t, drivers.MachineRunning, m.State, "%s is kept", m.ProviderID)
	}
	assert.EqualValues(t, 1, aws.ToInt32(fake.groups["ng"].ScalingConfig.DesiredSize), "not raised for the instance on standby")

	require.NoError(t, d.TerminateMachine(ctx, class, "ng", standby))
	after, err := awscloud.GroupInstances(ctx, w.api.AutoScaling, w.api.EC2, "ng-asg")
	require.NoError(t, err)
	assert.EqualValues(t, 1, after.DesiredSize, "the desired capacity never counted it")
	assert.EqualValues(t, 1, aws.ToInt32(fake.groups["ng"].ScalingConfig.DesiredSize))
}
