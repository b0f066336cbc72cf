package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// A class whose region was changed under a running group still has Nodes
// on the old region's instances; when they go, their instances must go
// too, in their own region, and the old group must not launch a
// replacement.
func TestTerminateMachineFollowsTheInstancesRegion(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "moved", UID: "uid-1"}
	name := GroupName("prod", "team-a", "moved")
	status, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 2, MaxReplicas: 2, TemplateHash: "h1"})
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	victim := status.Machines[0].ProviderID

	moved := class
	moved.Spec = *class.Spec.DeepCopy()
	moved.Spec.EKSAutoscalingGroup.Region = "us-west-2"
	require.NoError(t, d.TerminateMachine(ctx, moved, name, victim))

	assert.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated}, w.state(t, victim),
		"the instance of %s, in %s, outlived its Node", victim, region)
	g, err := awscloud.FindGroup(ctx, w.asg, name)
	require.NoError(t, err)
	assert.EqualValues(t, 1, aws.ToInt32(g.DesiredCapacity), "the old region's group was lowered with the termination, so it launches no replacement")
}
