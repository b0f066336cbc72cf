package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestARemovedSpotAllocationStrategyIsResetOnTheGroup: a class that stops
// naming spotAllocationStrategy asks for AWS's default (lowest-price, the
// API's default for a group made without one). The group gets it, as a
// new group would: Auto Scaling keeps a strategy an update leaves out.
func TestARemovedSpotAllocationStrategyIsResetOnTheGroup(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	s := class.Spec.EKSAutoscalingGroup
	s.InstanceType = ""
	s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large", "m5a.large"},
		OnDemandPercentageAboveBaseCapacity: aws.Int32(0), SpotAllocationStrategy: "capacity-optimized"}
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 0, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	require.Equal(t, "capacity-optimized", aws.ToString(g.MixedInstancesPolicy.InstancesDistribution.SpotAllocationStrategy))

	mixed := *s.MixedInstances
	mixed.SpotAllocationStrategy = ""
	s.MixedInstances = &mixed
	require.NotNil(t, groupChanges(g, group.Name, s), "the group has a strategy the class no longer names")

	group.TemplateHash = "h2"
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err = awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	assert.Equal(t, "lowest-price", aws.ToString(g.MixedInstancesPolicy.InstancesDistribution.SpotAllocationStrategy), "AWS's default")
	assert.Nil(t, groupChanges(g, group.Name, s), "in step")

	// A group made without a strategy is in step with a class naming none.
	fresh := group
	fresh.Name, fresh.Owner.Name = GroupName("prod", "team-a", "api"), "api"
	_, err = d.EnsureGroup(ctx, fresh)
	require.NoError(t, err)
	g, err = awscloud.FindGroup(ctx, w.asg, fresh.Name)
	require.NoError(t, err)
	assert.Nil(t, groupChanges(g, fresh.Name, s), "a new group and an updated one are alike")
}
