package node

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAKubeletsProviderIDHoldsNoMachine: a kubelet may set its own Node's
// providerID once, to anything, and a machine's providerID can be guessed.
// A Node that took the providerID of the machine nodeset makes for another
// tenant's Node does not keep that Node from recording it. A Node nodeset
// made or took (sealed) that has it does, and the refusal does not name it
// to the tenant whose Node it is.
func TestAKubeletsProviderIDHoldsNoMachine(t *testing.T) {
	claimer := func(sealed bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "evil", Labels: map[string]string{}},
			Spec:   corev1.NodeSpec{ProviderID: "test:///web-a"},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"}}}
		if sealed {
			n.Labels[nodesetv1alpha1.LabelSeal] = "some-set"
			n.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
		}
		return n
	}

	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"), claimer(false))
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, "test:///web-a", f.get("web-a").Spec.ProviderID, "a kubelet's claim holds nothing")

	f = newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"), claimer(true))
	err := f.sync("web-a")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "answered providerID test:///web-a for machine web-a, which another Node has already")
	got := f.get("web-a")
	assert.Empty(t, got.Spec.ProviderID, "two Nodes of nodeset's never share a providerID")
	assert.NotContains(t, got.Annotations[nodesetv1alpha1.AnnotationProvisioningError], "evil")
	assert.NotContains(t, strings.Join(f.events(), "\n"), "evil", "the other Node is not named to this Node's tenant")
}
