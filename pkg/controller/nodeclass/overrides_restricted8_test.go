package nodeclass

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestNoClassSetsTheRestrictedTenantLabel: tenants' pods select
// node-restriction.kubernetes.io/nodeset-tenant to land on their own
// Dedicated Nodes only. A class that put it on its Nodes, a Shared one
// above all, would draw a namespace's Dedicated pods onto Nodes that are
// not that namespace's: it is refused whatever the tenancy.
func TestNoClassSetsTheRestrictedTenantLabel(t *testing.T) {
	for _, tenancy := range []nodesetv1alpha1.Tenancy{nodesetv1alpha1.TenancyShared, nodesetv1alpha1.TenancyDedicated} {
		spec := &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated, Tenancy: tenancy,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
			NodeTemplate:   nodesetv1alpha1.NodeTemplate{Labels: map[string]string{nodesetv1alpha1.LabelTenantRestricted: "ml-research"}}}
		err := SpecErrors(spec)
		require.Error(t, err, "%s class", tenancy)
		assert.ErrorContains(t, err, "spec.nodeTemplate.labels[node-restriction.kubernetes.io/nodeset-tenant]")
	}
}
