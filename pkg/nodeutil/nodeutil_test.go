package nodeutil

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func TestRegisteredTaints(t *testing.T) {
	taint := func(key string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Effect: effect}
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}
	node := func(ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{
				taint(nodesetv1alpha1.TaintUnregistered, corev1.TaintEffectNoSchedule),
				taint(AutoscalerStartupTaint, corev1.TaintEffectNoSchedule),
				dedicated,
				taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoSchedule),
				taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
				taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule),
				taint(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule),
			}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
		}
	}
	// Ready: the startup taints and the NoSchedule taints of a Ready
	// condition other than True go; the rest, NoExecute included (the node
	// lifecycle controller's eviction taint), stays.
	assert.Equal(t, []corev1.Taint{
		dedicated,
		taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
		taint(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule),
	}, RegisteredTaints(node(corev1.ConditionTrue)))
	// Not Ready: only nodeset's own startup taints go.
	for _, status := range []corev1.ConditionStatus{corev1.ConditionFalse, corev1.ConditionUnknown} {
		assert.Equal(t, node(status).Spec.Taints[2:], RegisteredTaints(node(status)), "Ready=%s", status)
	}
	read := node(corev1.ConditionTrue)
	before := slices.Clone(read.Spec.Taints)
	RegisteredTaints(read)
	assert.Equal(t, before, read.Spec.Taints, "the Node read is left as it was")
}

func TestNameList(t *testing.T) {
	n, listed := NameList([]string{"b", "a", "b"})
	if n != 2 || listed != "a, b" {
		t.Errorf("NameList(b, a, b) = %d, %q; want 2, %q", n, listed, "a, b")
	}
	var many []string
	for i := range 25 {
		many = append(many, fmt.Sprintf("n%02d", i))
	}
	n, listed = NameList(many)
	want := "n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 15 more"
	if n != 25 || listed != want {
		t.Errorf("NameList(25 names) = %d, %q; want 25, %q", n, listed, want)
	}
}

func TestInDomain(t *testing.T) {
	for key, want := range map[string]bool{
		"kubernetes.io/hostname":           true,
		"node.kubernetes.io/instance-type": true,
		"kubernetes.io.example.com/x":      false,
		"examplekubernetes.io/x":           false,
		"kubernetes.io":                    false, // no prefix
		"x/kubernetes.io":                  false,
	} {
		assert.Equal(t, want, InDomain(key, "kubernetes.io"), key)
	}
}

func TestPhase(t *testing.T) {
	ready := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	failed := map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "OutOfCapacity: no room"}
	now := metav1.Now()
	tests := []struct {
		name string
		node corev1.Node
		want string
	}{
		{"no machine", corev1.Node{}, PhaseProvisioning},
		{"no machine, its create failed", corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: failed}}, PhaseProvisioningFailed},
		{"a machine, not Ready", corev1.Node{Spec: corev1.NodeSpec{ProviderID: "simulated:///a"}}, PhaseRegistering},
		{"a machine, an earlier failure not yet cleared", corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: failed},
			Spec: corev1.NodeSpec{ProviderID: "simulated:///a"}}, PhaseRegistering},
		{"Ready", corev1.Node{Spec: corev1.NodeSpec{ProviderID: "simulated:///a"}, Status: corev1.NodeStatus{Conditions: ready}}, PhaseReady},
		{"deleted, its create failed", corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: failed, DeletionTimestamp: &now}}, PhaseDraining},
		{"deleted and drained", corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now,
			Annotations: map[string]string{nodesetv1alpha1.AnnotationDrainFinished: "x"}}}, PhaseDeleting},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Phase(&tt.node), tt.name)
	}
}
