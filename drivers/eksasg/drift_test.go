package eksasg

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
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

// TestAGroupRepointedByHandLaunchesFromLatestAgain: the group launches from
// its launch template's $Latest, where every new template hash is a new
// version. Someone may point the group at a fixed version or at $Default
// (the console's "Edit" of an Auto Scaling group offers both). The group
// would then go on launching the old configuration: every replacement of a
// rollout outdated on arrival, replaced again, for ever. The next look at
// the group points it back at $Latest, whether the template hash changed
// or not, and what it launches then carries the NodeSet's hash.
func TestAGroupRepointedByHandLaunchesFromLatestAgain(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	now := time.Now()
	clock := func() time.Time { return now }
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), Now: clock})
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: w.class(), Replicas: 1, MaxReplicas: 5, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	launchesFrom := func() string {
		g := w.describe(t, group.Name)
		require.NotNil(t, g.LaunchTemplate)
		return aws.ToString(g.LaunchTemplate.LaunchTemplateName) + ":" + aws.ToString(g.LaunchTemplate.Version)
	}
	require.Equal(t, group.Name+":$Latest", launchesFrom())

	for _, pinned := range []string{"1", "$Default"} {
		_, err = w.asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String(group.Name),
			LaunchTemplate: &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(group.Name), Version: aws.String(pinned)}})
		require.NoError(t, err)
		require.Equal(t, group.Name+":"+pinned, launchesFrom())
		now = now.Add(time.Minute) // the next poll
		_, err = d.EnsureGroup(ctx, group)
		require.NoError(t, err)
		assert.Equal(t, group.Name+":$Latest", launchesFrom(), "pointed at %s by hand, same template hash", pinned)
	}

	_, err = w.asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String(group.Name),
		LaunchTemplate: &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(group.Name), Version: aws.String("1")}})
	require.NoError(t, err)
	group.TemplateHash, group.Replicas = "h2", 2
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, group.Name+":$Latest", launchesFrom(), "pointed at version 1 by hand, then a new template hash")
	hashes := map[string]int{}
	for _, m := range status.Machines {
		hashes[m.TemplateHash]++
	}
	assert.Equal(t, map[string]int{"h1": 1, "h2": 1}, hashes, "the instance launched for the new hash is of the new hash")
}

// TestARemovedSpotMaxPriceIsRemovedFromTheGroup: a spotMaxPrice below the
// market keeps a mixed-instances group from launching spot instances
// (SpotMaxPriceTooLow). Removing it from the class must remove it from the
// group, which Auto Scaling does only for an empty string sent in its
// place: a policy without it keeps the price the group has.
func TestARemovedSpotMaxPriceIsRemovedFromTheGroup(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	s := class.Spec.EKSAutoscalingGroup
	s.InstanceType = ""
	s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large", "m5a.large"},
		OnDemandPercentageAboveBaseCapacity: aws.Int32(0), SpotAllocationStrategy: "price-capacity-optimized", SpotMaxPrice: "0.001"}
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 0, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	require.Equal(t, "0.001", aws.ToString(g.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice))

	mixed := *s.MixedInstances
	mixed.SpotMaxPrice = ""
	s.MixedInstances = &mixed
	update := groupChanges(g, group.Name, s)
	require.NotNil(t, update, "the group has a max price the class no longer has")
	require.NotNil(t, update.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice, "sent, as an empty string")
	assert.Empty(t, aws.ToString(update.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice))

	group.TemplateHash = "h2"
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err = awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	assert.Empty(t, aws.ToString(g.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice), "the group has no max price any more")
	assert.Nil(t, groupChanges(g, group.Name, s), "in step")
}
