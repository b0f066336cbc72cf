package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"nodeset.dev/nodeset/test/framework"
)

// TestCapacityLabelsForScaleFromZero: the template node of a managed node
// group carries what a real node of it carries: the first instance type's
// architecture (arm64 for Graviton) and type, the region, one zone of the
// node group's subnets (the lowest-named), the class's labels and
// capacity type, and the class's taints.
func TestCapacityLabelsForScaleFromZero(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	subnetB := framework.SecondZoneSubnet(t, w.api.EC2.(*ec2.Client), w.subnet, region+"b")
	for _, tc := range []struct {
		name          string
		instanceTypes []string
		subnets       []string
		arch, zone    string
	}{
		{"Graviton", []string{"c7g.large", "m7g.large"}, []string{subnetB, w.subnet}, "arm64", region + "a"},
		{"x86 listed as i386 too", []string{"t2.medium"}, []string{subnetB}, "amd64", region + "b"},
		{"EKS's default type", nil, []string{w.subnet}, "amd64", region + "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := w.class()
			section := *class.Spec.EKSManagedNodeGroup
			section.InstanceTypes = tc.instanceTypes
			section.Subnets = tc.subnets
			class.Spec.EKSManagedNodeGroup = &section
			capacity, err := d.Capacity(ctx, class)
			require.NoError(t, err)
			instanceType := defaultInstanceType
			if len(tc.instanceTypes) > 0 {
				instanceType = tc.instanceTypes[0]
			}
			assert.Equal(t, map[string]string{
				corev1.LabelArchStable:           tc.arch,
				corev1.LabelInstanceTypeStable:   instanceType,
				corev1.LabelTopologyRegion:       region,
				corev1.LabelTopologyZone:         tc.zone,
				"topology.ebs.csi.aws.com/zone":  tc.zone,
				"pool":                           "general",
				"eks.amazonaws.com/capacityType": "ON_DEMAND",
			}, capacity.Labels)
			assert.Equal(t, []corev1.Taint{{Key: "pool", Value: "general", Effect: corev1.TaintEffectPreferNoSchedule}}, capacity.Taints)
		})
	}
}
