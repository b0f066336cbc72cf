package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestRemovedDistributionSettingsAreResetOnTheGroup: a class that stops
// naming a setting of its mixed-instances distribution asks for AWS's
// default, and the group gets it: Auto Scaling keeps a value an update
// leaves out, so a class that went from all-spot (on-demand share 0) back
// to the default would otherwise go on launching spot instances, and a
// removed spot strategy would stay. A group made without the setting is
// in step with a class naming none.
func TestRemovedDistributionSettingsAreResetOnTheGroup(t *testing.T) {
	for _, tt := range []struct {
		name   string
		set    nodesetv1alpha1.MixedInstancesPolicy
		remove func(*nodesetv1alpha1.MixedInstancesPolicy)
		check  func(*testing.T, *asgtypes.InstancesDistribution)
	}{
		{
			name: "on-demand base and share",
			set:  nodesetv1alpha1.MixedInstancesPolicy{OnDemandBaseCapacity: aws.Int32(2), OnDemandPercentageAboveBaseCapacity: aws.Int32(0), SpotAllocationStrategy: "price-capacity-optimized"},
			remove: func(m *nodesetv1alpha1.MixedInstancesPolicy) {
				m.OnDemandBaseCapacity, m.OnDemandPercentageAboveBaseCapacity = nil, nil
			},
			check: func(t *testing.T, dist *asgtypes.InstancesDistribution) {
				assert.EqualValues(t, 0, aws.ToInt32(dist.OnDemandBaseCapacity), "AWS's default base")
				assert.EqualValues(t, 100, aws.ToInt32(dist.OnDemandPercentageAboveBaseCapacity), "AWS's default share: all on-demand")
				assert.Equal(t, "price-capacity-optimized", aws.ToString(dist.SpotAllocationStrategy), "what the class still names stays")
			},
		},
		{
			name:   "spot allocation strategy",
			set:    nodesetv1alpha1.MixedInstancesPolicy{OnDemandPercentageAboveBaseCapacity: aws.Int32(0), SpotAllocationStrategy: "capacity-optimized"},
			remove: func(m *nodesetv1alpha1.MixedInstancesPolicy) { m.SpotAllocationStrategy = "" },
			check: func(t *testing.T, dist *asgtypes.InstancesDistribution) {
				assert.Equal(t, "lowest-price", aws.ToString(dist.SpotAllocationStrategy), "AWS's API default")
				assert.EqualValues(t, 0, aws.ToInt32(dist.OnDemandPercentageAboveBaseCapacity), "what the class still names stays")
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			d := w.driver("prod")
			class := w.class()
			s := class.Spec.EKSAutoscalingGroup
			s.InstanceType = ""
			mixed := tt.set
			mixed.InstanceTypes = []string{"m5.large", "m5a.large"}
			s.MixedInstances = &mixed
			owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
			group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: owner, Class: class, Replicas: 0, MaxReplicas: 3, TemplateHash: "h1"}
			_, err := d.EnsureGroup(ctx, group)
			require.NoError(t, err)
			g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
			require.NoError(t, err)

			removed := mixed
			tt.remove(&removed)
			s.MixedInstances = &removed
			require.NotNil(t, groupChanges(g, group.Name, s), "the group has a setting the class no longer names")

			group.TemplateHash = "h2"
			_, err = d.EnsureGroup(ctx, group)
			require.NoError(t, err)
			g, err = awscloud.FindGroup(ctx, w.asg, group.Name)
			require.NoError(t, err)
			tt.check(t, g.MixedInstancesPolicy.InstancesDistribution)
			assert.Nil(t, groupChanges(g, group.Name, s), "in step")

			fresh := group
			fresh.Name, fresh.Owner.Name = GroupName("prod", "team-a", "api"), "api"
			_, err = d.EnsureGroup(ctx, fresh)
			require.NoError(t, err)
			g, err = awscloud.FindGroup(ctx, w.asg, fresh.Name)
			require.NoError(t, err)
			assert.Nil(t, groupChanges(g, fresh.Name, s), "a new group and an updated one are alike")
		})
	}
}
