package simulated

import (
	"testing"

	"github.com/stretchr/testify/assert"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTheSimulatedKubeletSetsNoRestrictedLabel: the simulated kubelet
// posts its machine's labels (simulated.labels) on its Node, as a real
// kubelet's --node-labels. A real kubelet may not set a
// node-restriction.kubernetes.io/ label (the NodeRestriction admission
// plugin refuses it, registration included); neither does the simulated
// one, so it never writes a Dedicated set's restricted tenant label, and
// a class's simulated.labels cannot put one on a Shared Node.
func TestTheSimulatedKubeletSetsNoRestrictedLabel(t *testing.T) {
	c := EffectiveCapacity(&nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{
		nodesetv1alpha1.LabelTenantRestricted: "ml-research", "node-restriction.kubernetes.io/pci": "true", "pool": "gpu"}})
	assert.Equal(t, "gpu", c.Labels["pool"])
	assert.NotContains(t, c.Labels, nodesetv1alpha1.LabelTenantRestricted)
	assert.NotContains(t, c.Labels, "node-restriction.kubernetes.io/pci")
}
