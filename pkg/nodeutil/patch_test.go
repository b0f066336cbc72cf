package nodeutil

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// apply applies patch to server as the API server does (the same JSON
// patch implementation).
func apply(t *testing.T, server *corev1.Node, patch []byte) (*corev1.Node, error) {
	t.Helper()
	doc, err := json.Marshal(server)
	require.NoError(t, err)
	p, err := jsonpatch.DecodePatch(patch)
	require.NoError(t, err)
	out, err := p.Apply(doc)
	if err != nil {
		return nil, err
	}
	var node corev1.Node
	require.NoError(t, json.Unmarshal(out, &node))
	return &node, nil
}

var startupTaint = corev1.Taint{Key: nodesetv1alpha1.TaintUnregistered, Effect: corev1.TaintEffectNoExecute}

func readNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "web-a", UID: "u1", ResourceVersion: "10",
			Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"},
			Finalizers: []string{nodesetv1alpha1.FinalizerTermination}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}, startupTaint}},
	}
}

// registered is read with its machine recorded and its startup taint lifted.
func registered(read *corev1.Node) *corev1.Node {
	want := read.DeepCopy()
	want.Spec.ProviderID = "simulated:///web-a"
	want.Annotations[nodesetv1alpha1.AnnotationDriver] = "simulated"
	want.Spec.Taints = WithoutStartupTaints(want.Spec.Taints)
	return want
}

func TestChangePatchLeavesOtherWritersChangesAlone(t *testing.T) {
	read := readNode()
	patch, changed := ChangePatch(read, registered(read))
	require.True(t, changed)
	// Meanwhile the kubelet labelled the Node and posted its status.
	server := read.DeepCopy()
	server.ResourceVersion = "12"
	server.Labels["kubernetes.io/hostname"] = "web-a"
	server.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	got, err := apply(t, server, patch)
	require.NoError(t, err, "no conflict with the kubelet's writes")
	assert.Equal(t, "simulated:///web-a", got.Spec.ProviderID)
	assert.Equal(t, "simulated", got.Annotations[nodesetv1alpha1.AnnotationDriver])
	assert.Equal(t, "0", got.Annotations["node.alpha.kubernetes.io/ttl"])
	assert.Equal(t, []corev1.Taint{{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}}, got.Spec.Taints)
	assert.Equal(t, "web-a", got.Labels["kubernetes.io/hostname"], "the kubelet's label stays")
	assert.True(t, IsReady(got), "the kubelet's status stays")
	assert.Equal(t, []string{nodesetv1alpha1.FinalizerTermination}, got.Finalizers)
}

func TestChangePatchFailsWhereItWouldUndoAnotherWrite(t *testing.T) {
	read := readNode()
	patch, _ := ChangePatch(read, registered(read))

	tainted := read.DeepCopy()
	tainted.Spec.Taints = append(tainted.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule})
	_, err := apply(t, tainted, patch)
	assert.Error(t, err, "the taints it replaces changed since they were read")

	replaced := read.DeepCopy()
	replaced.UID = "u2"
	_, err = apply(t, replaced, patch)
	assert.Error(t, err, "another Node under the same name")
}

// A map or list read empty is set whole, after a test that it is still
// absent: another writer's change elsewhere (a lagging copy's usual case)
// does not refuse it, and the same map or list made meanwhile by another
// writer is never overwritten.
func TestChangePatchOfAMapOrListReadEmptyTestsItIsStillAbsent(t *testing.T) {
	read := readNode()
	read.Annotations, read.Spec.Taints = nil, nil
	want := read.DeepCopy()
	want.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: "simulated"}
	want.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
	patch, changed := ChangePatch(read, want)
	require.True(t, changed)
	got, err := apply(t, read, patch)
	require.NoError(t, err)
	assert.Equal(t, want.Annotations, got.Annotations)
	assert.Equal(t, want.Spec.Taints, got.Spec.Taints)

	// Written since in other fields (the kubelet's status and labels):
	// applies, and keeps them.
	server := read.DeepCopy()
	server.ResourceVersion = "11"
	server.Labels["kubernetes.io/hostname"] = "web-a"
	server.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	got, err = apply(t, server, patch)
	require.NoError(t, err, "no conflict with writes elsewhere")
	assert.Equal(t, want.Annotations, got.Annotations)
	assert.Equal(t, "web-a", got.Labels["kubernetes.io/hostname"])
	assert.True(t, IsReady(got))

	// The map, or the list, made since (the ttl annotation, a taint): not
	// overwritten.
	annotated := read.DeepCopy()
	annotated.Annotations = map[string]string{"node.alpha.kubernetes.io/ttl": "0"}
	_, err = apply(t, annotated, patch)
	assert.Error(t, err, "annotations made since")
	tainted := read.DeepCopy()
	tainted.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	_, err = apply(t, tainted, patch)
	assert.Error(t, err, "taints made since")
}

func TestChangePatchRemovesAndAddsFinalizersAndKeys(t *testing.T) {
	read := readNode()
	read.Finalizers = []string{"other.example/hold"}
	read.Annotations[nodesetv1alpha1.AnnotationProvisioningError] = "OutOfCapacity: none left"
	want := read.DeepCopy()
	want.Finalizers = append(want.Finalizers, nodesetv1alpha1.FinalizerTermination)
	delete(want.Annotations, nodesetv1alpha1.AnnotationProvisioningError)
	want.Spec.Unschedulable = true
	patch, changed := ChangePatch(read, want)
	require.True(t, changed)
	got, err := apply(t, read, patch)
	require.NoError(t, err)
	assert.Equal(t, want.Finalizers, got.Finalizers)
	assert.Equal(t, want.Annotations, got.Annotations)
	assert.True(t, got.Spec.Unschedulable)

	_, changed = ChangePatch(read, read.DeepCopy())
	assert.False(t, changed, "nothing to write")
}

// cordon is the node controller's cordon of read: unschedulable, and the
// drain's start recorded.
func cordon(read *corev1.Node, started string) []byte {
	want := read.DeepCopy()
	want.Spec.Unschedulable = true
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[nodesetv1alpha1.AnnotationDrainStarted] = started
	patch, _ := ChangePatch(read, want)
	return patch
}

func TestCordonAndReleasePatches(t *testing.T) {
	read := readNode()
	cordoned, err := apply(t, read, cordon(read, "2026-11-24T00:00:00Z"))
	require.NoError(t, err)
	assert.True(t, cordoned.Spec.Unschedulable)
	assert.Equal(t, "2026-11-24T00:00:00Z", cordoned.Annotations[nodesetv1alpha1.AnnotationDrainStarted], "a key with a slash")

	noAnnotations := read.DeepCopy()
	noAnnotations.Annotations = nil
	cordoned, err = apply(t, noAnnotations, cordon(noAnnotations, "t"))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{nodesetv1alpha1.AnnotationDrainStarted: "t"}, cordoned.Annotations)

	// kube-controller-manager taints the cordoned Node; the release still
	// applies, and keeps the taint.
	server := cordoned.DeepCopy()
	server.Finalizers = []string{"other.example/hold", nodesetv1alpha1.FinalizerTermination}
	server.Spec.Taints = append(server.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	patch, ok := RemoveFinalizerPatch(server, nodesetv1alpha1.FinalizerTermination)
	require.True(t, ok)
	released, err := apply(t, server, patch)
	require.NoError(t, err)
	assert.Equal(t, []string{"other.example/hold"}, released.Finalizers)
	assert.Len(t, released.Spec.Taints, 3)

	// The finalizers moved since they were read: refused, nothing removed.
	moved := server.DeepCopy()
	moved.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
	_, err = apply(t, moved, patch)
	assert.Error(t, err)

	_, ok = RemoveFinalizerPatch(released, nodesetv1alpha1.FinalizerTermination)
	assert.False(t, ok, "nothing to release")
}

// A guarded merge patch writes only the fields given, and the API server's
// merge patch takes its resourceVersion as a precondition: a caller's own
// resourceVersion key cannot replace the one read.
func TestGuardedMergePatch(t *testing.T) {
	patch := GuardedMergePatch("42", map[string]any{"finalizers": []string{"a"}, "resourceVersion": "7"},
		map[string]any{"spec": map[string]any{"replicas": 3}})
	assert.JSONEq(t, `{"metadata":{"finalizers":["a"],"resourceVersion":"42"},"spec":{"replicas":3}}`, string(patch))

	assert.JSONEq(t, `{"metadata":{"resourceVersion":"1"}}`, string(GuardedMergePatch("1", nil, nil)))

	annotations := map[string]any{"annotations": map[string]any{"gone": nil}}
	patch = GuardedMergePatch("5", annotations, nil)
	assert.JSONEq(t, `{"metadata":{"annotations":{"gone":null},"resourceVersion":"5"}}`, string(patch))
	assert.NotContains(t, annotations, "resourceVersion", "the caller's map is not written")
}
