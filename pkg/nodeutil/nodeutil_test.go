package nodeutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

func TestIsReady(t *testing.T) {
	node := func(conditions ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: conditions}}
	}
	assert.False(t, IsReady(node()), "no conditions")
	assert.False(t, IsReady(node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown})))
	assert.False(t, IsReady(node(corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue})))
	assert.True(t, IsReady(node(
		corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
		corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue})))
}

func TestWithoutString(t *testing.T) {
	in := []string{"a", "b", "a", "c"}
	assert.Equal(t, []string{"b", "c"}, WithoutString(in, "a"))
	assert.Equal(t, []string{"a", "b", "a", "c"}, in, "the input is not modified")
	assert.Empty(t, WithoutString(nil, "a"))
}

func TestNodeSetOf(t *testing.T) {
	ns, name, ok := NodeSetOf(map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: "team-a", nodesetv1alpha1.LabelNodeSet: "web"})
	assert.True(t, ok)
	assert.Equal(t, "team-a", ns)
	assert.Equal(t, "web", name)
	_, _, ok = NodeSetOf(map[string]string{nodesetv1alpha1.LabelNodeSet: "web"})
	assert.False(t, ok, "a set name without a namespace is no set")
	_, _, ok = NodeSetOf(nil)
	assert.False(t, ok, "a lone Node")
}
