package nodeutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
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
