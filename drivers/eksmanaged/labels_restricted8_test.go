package eksmanaged

import (
	"testing"

	"github.com/stretchr/testify/assert"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestTheRestrictedTenantLabelStaysOffTheNodeGroup: EKS refuses node
// group labels under kubernetes.io and its subdomains, and the kubelet of
// a node group refuses node-restriction.kubernetes.io/ labels: a Dedicated
// set's restricted tenant label goes on the Nodes nodeset makes, never to
// EKS.
func TestTheRestrictedTenantLabelStaysOffTheNodeGroup(t *testing.T) {
	got := labels(&nodesetv1alpha1.EKSManagedNodeGroup{Labels: map[string]string{"pool": "gpu"}}, drivers.Group{Labels: map[string]string{
		nodesetv1alpha1.LabelTenant: "ml-research", nodesetv1alpha1.LabelTenantRestricted: "ml-research", "tier": "web"}})
	assert.Equal(t, map[string]string{"pool": "gpu", "tier": "web", nodesetv1alpha1.LabelTenant: "ml-research"}, got)
}
