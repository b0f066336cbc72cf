package eksasg

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestGroupSettingsFollowTheClass: the instance types of a mixed-instances
// class, its spot settings, its subnets and capacityRebalance are the
// group's, not the launch template's. A change of them (the class edited,
// or a NodeSet overriding mixedInstances.instanceTypes) changes the
// template hash and rolls the NodeSet; the replacements must then launch
// as the class now says, not as it said when the group was made.
func TestGroupSettingsFollowTheClass(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	subnetB := w.secondSubnet(t)
	d := w.driver("prod")
	class := w.class()
	s := class.Spec.EKSAutoscalingGroup
	s.InstanceType = ""
	s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large"}, OnDemandPercentageAboveBaseCapacity: aws.Int32(100)}
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)

	s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m6i.large", "m5a.large"},
		OnDemandPercentageAboveBaseCapacity: aws.Int32(25), SpotAllocationStrategy: "price-capacity-optimized"}
	s.SubnetIDs = []string{w.subnet, subnetB}
	group.TemplateHash = "h2"
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)

	g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	require.NotNil(t, g.MixedInstancesPolicy)
	var types []string
	for _, o := range g.MixedInstancesPolicy.LaunchTemplate.Overrides {
		types = append(types, aws.ToString(o.InstanceType))
	}
	assert.Equal(t, []string{"m6i.large", "m5a.large"}, types, "the group launches the class's types now")
	assert.Equal(t, group.Name, aws.ToString(g.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification.LaunchTemplateName))
	dist := g.MixedInstancesPolicy.InstancesDistribution
	require.NotNil(t, dist)
	assert.EqualValues(t, 25, aws.ToInt32(dist.OnDemandPercentageAboveBaseCapacity))
	assert.Equal(t, "price-capacity-optimized", aws.ToString(dist.SpotAllocationStrategy))
	zones := strings.Split(aws.ToString(g.VPCZoneIdentifier), ",")
	sort.Strings(zones)
	want := append([]string(nil), s.SubnetIDs...)
	sort.Strings(want)
	assert.Equal(t, want, zones, "and spreads over the class's subnets")
	// moto does not update capacity rebalancing: groupChanges has it.
	update := groupChanges(g, group.Name, &nodesetv1alpha1.EKSAutoscalingGroup{SubnetIDs: s.SubnetIDs, MixedInstances: s.MixedInstances,
		CapacityRebalance: aws.Bool(true)})
	require.NotNil(t, update)
	assert.True(t, aws.ToBool(update.CapacityRebalance))
	assert.Nil(t, update.VPCZoneIdentifier, "the subnets are in step")
	assert.Nil(t, groupChanges(g, group.Name, s), "nothing else to change")

	t.Log("in step: nothing more to change")
	calls := &countingAutoScaling{AutoScaling: w.asg}
	again := New(Options{Cluster: "prod", Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		return calls, w.ec2, nil
	}})
	_, err = again.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Zero(t, calls.updates, "a group in step is not updated")
}

type countingAutoScaling struct {
	awscloud.AutoScaling
	updates int
}

func (c *countingAutoScaling) UpdateAutoScalingGroup(ctx context.Context, in *autoscaling.UpdateAutoScalingGroupInput, opts ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error) {
	c.updates++
	return c.AutoScaling.UpdateAutoScalingGroup(ctx, in, opts...)
}
