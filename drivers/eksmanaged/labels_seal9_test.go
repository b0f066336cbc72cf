package eksmanaged

import (
	"testing"

	"github.com/stretchr/testify/assert"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestTheSealStaysOffTheNodeGroup: the seal of a set's Nodes goes on the
// Nodes nodeset makes, never to EKS, whose kubelets may not set it.
func TestTheSealStaysOffTheNodeGroup(t *testing.T) {
	got := labels(&nodesetv1alpha1.EKSManagedNodeGroup{}, drivers.Group{Labels: map[string]string{
		nodesetv1alpha1.LabelSeal: "0123abcd", "tier": "web"}})
	assert.Equal(t, map[string]string{"tier": "web"}, got)
}
