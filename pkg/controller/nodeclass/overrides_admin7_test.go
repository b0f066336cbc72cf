package nodeclass

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/resolve"
)

// TestAClassThatCanServeNoNodeSetIsRefused: a Node's annotations are at
// most 256 KiB, and nodeset leaves part of that for what it and the node's
// agents record there, so a NodeSet's Nodes get at most
// resolve.NodeAnnotationBudget of template annotations. A class whose own
// annotations take more than that could serve no NodeSet at all, not even
// one without annotations of its own: it is refused (the webhook) and
// reported Valid=False (the controller), naming the field and the budget,
// rather than accepted and Valid while every tenant is told its template
// is at fault.
func TestAClassThatCanServeNoNodeSetIsRefused(t *testing.T) {
	spec := func(size int) *nodesetv1alpha1.NodeClassSpec {
		return &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
			NodeTemplate:   nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{"a": strings.Repeat("v", size-1)}}}
	}
	plain := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}

	over := spec(resolve.NodeAnnotationBudget + 1)
	require.NotEmpty(t, resolve.NodeAnnotationErrors(&nodesetv1alpha1.NodeClass{Spec: *over}, plain), "no NodeSet fits beside it")
	err := SpecErrors(over)
	require.Error(t, err, "the class is refused")
	assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
	assert.Contains(t, err.Error(), "spec.nodeTemplate.annotations")
	assert.Contains(t, err.Error(), "229376")

	at := spec(resolve.NodeAnnotationBudget)
	assert.Empty(t, resolve.NodeAnnotationErrors(&nodesetv1alpha1.NodeClass{Spec: *at}, plain), "a NodeSet without annotations fits")
	assert.NoError(t, SpecErrors(at))
}
