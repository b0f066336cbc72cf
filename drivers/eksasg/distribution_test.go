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

// TestRemovedOnDemandSettingsAreResetOnTheGroup: a class that stops
// naming onDemandBaseCapacity or onDemandPercentageAboveBaseCapacity asks
// for AWS's defaults (0, and 100: all on-demand). The group gets them: Auto
// Scaling keeps a value an update leaves out, so a class that went from
// all-spot (0) back to the default would otherwise go on launching spot
// instances.
func TestRemovedOnDemandSettingsAreResetOnTheGroup(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	s := class.Spec.EKSAutoscalingGroup
	s.InstanceType = ""
	s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large", "m5a.large"},
		OnDemandBaseCapacity: aws.Int32(2), OnDemandPercentageAboveBaseCapacity: aws.Int32(0), SpotAllocationStrategy: "price-capacity-optimized"}
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 0, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	require.EqualValues(t, 0, aws.ToInt32(g.MixedInstancesPolicy.InstancesDistribution.OnDemandPercentageAboveBaseCapacity))

	mixed := *s.MixedInstances
	mixed.OnDemandBaseCapacity, mixed.OnDemandPercentageAboveBaseCapacity = nil, nil
	s.MixedInstances = &mixed
	require.NotNil(t, groupChanges(g, group.Name, s), "the group has settings the class no longer has")

	group.TemplateHash = "h2"
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err = awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	dist := g.MixedInstancesPolicy.InstancesDistribution
	assert.EqualValues(t, 0, aws.ToInt32(dist.OnDemandBaseCapacity), "AWS's default base")
	assert.EqualValues(t, 100, aws.ToInt32(dist.OnDemandPercentageAboveBaseCapacity), "AWS's default share: all on-demand")
	assert.Equal(t, "price-capacity-optimized", aws.ToString(dist.SpotAllocationStrategy), "what the class still names stays")
	assert.Nil(t, groupChanges(g, group.Name, s), "in step")
}
