package autoscaler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestTemplateNodeLabelsAreTheDrivers: the architecture, instance type,
// region and zone of the template node are those the driver reported for a
// node of the class (a Graviton type's arm64); amd64 only when the driver
// names no architecture.
func TestTemplateNodeLabelsAreTheDrivers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		labels   map[string]string
		wantArch string
	}{
		{"Graviton", map[string]string{corev1.LabelInstanceTypeStable: "m7g.large", corev1.LabelArchStable: "arm64",
			corev1.LabelTopologyRegion: "us-east-1", corev1.LabelTopologyZone: "us-east-1b"}, "arm64"},
		{"no architecture reported", map[string]string{corev1.LabelInstanceTypeStable: "sim.small"}, "amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass()
			class.Status.Capacity.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			class.Status.Capacity.Labels = tc.labels
			f := newClassFixture(t, class, nil, testSet(0))
			node, err := f.server.TemplateNode(testSet(0))
			require.NoError(t, err)
			assert.Equal(t, tc.wantArch, node.Labels[corev1.LabelArchStable])
			assert.Equal(t, "linux", node.Labels[corev1.LabelOSStable])
			for k, v := range tc.labels {
				assert.Equal(t, v, node.Labels[k], k)
			}
		})
	}
}
