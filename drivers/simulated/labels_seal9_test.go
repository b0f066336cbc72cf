package simulated

import (
	"testing"

	"github.com/stretchr/testify/assert"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTheSimulatedKubeletSetsNoSeal: the seal is a restricted label, which
// no kubelet may set; a class's simulated.labels cannot have the simulated
// kubelet post one.
func TestTheSimulatedKubeletSetsNoSeal(t *testing.T) {
	c := EffectiveCapacity(&nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{nodesetv1alpha1.LabelSeal: "0123abcd", "pool": "gpu"}})
	assert.Equal(t, "gpu", c.Labels["pool"])
	assert.NotContains(t, c.Labels, nodesetv1alpha1.LabelSeal)
}
