package eksasg

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestCapacityLabelsForScaleFromZero: the labels of the template node are
// those of a real node of the group, so that pods selecting an
// architecture, a region or a zone scale a NodeSet from zero: the
// architecture of the instance type (arm64 for Graviton; amd64 for types
// EC2 also lists as i386), its type, the region, and one zone of the
// group's subnets (the lowest-named: a template is one node).
func TestCapacityLabelsForScaleFromZero(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	subnetB := w.secondSubnet(t)
	for _, tc := range []struct {
		name         string
		instanceType string
		subnets      []string
		arch, zone   string
	}{
		{"Graviton", "m7g.large", []string{w.subnet}, "arm64", region + "a"},
		{"Graviton burstable", "t4g.medium", []string{subnetB}, "arm64", region + "b"},
		{"x86 listed as i386 too", "t2.medium", []string{subnetB, w.subnet}, "amd64", region + "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := w.class()
			section := *class.Spec.EKSAutoscalingGroup
			section.InstanceType = tc.instanceType
			section.SubnetIDs = tc.subnets
			class.Spec.EKSAutoscalingGroup = &section
			capacity, err := d.Capacity(ctx, class)
			require.NoError(t, err)
			assert.Equal(t, map[string]string{
				corev1.LabelArchStable:          tc.arch,
				corev1.LabelInstanceTypeStable:  tc.instanceType,
				corev1.LabelTopologyRegion:      region,
				corev1.LabelTopologyZone:        tc.zone,
				"topology.ebs.csi.aws.com/zone": tc.zone,
			}, capacity.Labels)
		})
	}
}
