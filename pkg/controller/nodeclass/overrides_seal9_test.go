package nodeclass

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestNoClassSetsTheSeal: the seal ties a Node to its NodeSet and class;
// a class's nodeTemplate may not set it.
func TestNoClassSetsTheSeal(t *testing.T) {
	spec := &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
		NodeTemplate:   nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelSeal: "0123abcd"}}}
	err := SpecErrors(spec)
	require.Error(t, err)
	assert.ErrorContains(t, err, "spec.nodeTemplate.labels[node-restriction.kubernetes.io/nodeset-owner]")
}
