package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/kubeletsim"
)

// podHold is a finalizer that keeps a deleted pod in the API, terminating,
// until the test removes it.
const podHold = "example.com/hold"

// heldPod creates a pod bound to node that stays terminating once deleted,
// until its podHold finalizer is removed (which the test's cleanup does).
func heldPod(t *testing.T, namespace, name, node string) {
	t.Helper()
	kube, _ := clients(t)
	_, err := kube.CoreV1().Pods(namespace).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{podHold}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := kube.CoreV1().Pods(namespace).Patch(context.Background(), name, types.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("releasing pod %s/%s: %v", namespace, name, err)
		}
	})
}

// TestATerminatingPodOnAnUnreachableNodeDoesNotHoldTheDrain: an evicted pod
// keeps its deletionTimestamp until a kubelet confirms it is gone, and the
// kubelet of an unreachable Node (Ready Unknown, tainted
// node.kubernetes.io/unreachable by kube-controller-manager) never will.
// Such a pod, a minute past its grace period, does not hold the drain: the
// Node is drained and deprovisioned long before its 30-minute drain timeout.
// The same terminating pod on a Node that is Ready still holds that Node's
// drain.
func TestATerminatingPodOnAnUnreachableNodeDoesNotHoldTheDrain(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "unreachable-drain")
	createClass(t, "unreachable-drain-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 30 * time.Minute}}
	})
	createSet(t, ns, "held", "unreachable-drain-sim", 2)
	eventually(t, 2*time.Minute, "2 nodes", converged(c, t, ns, "held", 2))
	nodes, err := setNodes(ctx, t, ns, "held")
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	cutOff, healthy := nodes[0].Name, nodes[1].Name
	heldPod(t, ns, "on-cut-off", cutOff)
	heldPod(t, ns, "on-healthy", healthy)

	_, err = kube.CoreV1().Nodes().Patch(ctx, cutOff, types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"cut off"}}}`, kubeletsim.AnnotationUnreachable), metav1.PatchOptions{})
	require.NoError(t, err)
	for _, node := range []string{cutOff, healthy} {
		require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	}
	eventually(t, time.Minute, "both pods evicted and terminating", func(ctx context.Context) (bool, string) {
		for _, name := range []string{"on-cut-off", "on-healthy"} {
			pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if pod.DeletionTimestamp == nil {
				return false, name + " not evicted yet"
			}
		}
		return true, ""
	})

	// kube-controller-manager marks the silent Node Ready=Unknown after its
	// grace period (50s); a minute past the pod's grace period the drain
	// stops waiting for it.
	var lastSeen string
	eventually(t, 4*time.Minute, cutOff+" drained and gone with its pod still terminating", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, cutOff, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		ready := "no Ready condition"
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				ready = "Ready=" + string(cond.Status)
			}
		}
		msg, _ := drainMessage(ctx, t, cutOff)
		lastSeen = ready + "; " + msg
		return false, lastSeen
	})
	events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + cutOff})
	require.NoError(t, err)
	var drained []string
	for _, e := range events.Items {
		assert.NotEqual(t, nodecontroller.ReasonDrainTimedOut, e.Reason, "the drain did not wait for its timeout: %s", e.Message)
		if e.Reason == nodecontroller.ReasonDrained {
			drained = append(drained, e.Message)
		}
	}
	require.Len(t, drained, 1, "a Drained Event for %s", cutOff)
	assert.Contains(t, drained[0], "1 terminating for over 1m0s past their grace period")
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, "on-cut-off", metav1.GetOptions{})
	if err == nil {
		assert.NotNil(t, pod.DeletionTimestamp, "the pod the drain left is still terminating")
	}

	// The healthy Node's pod is as old, but its kubelet answers: it still
	// holds that drain, also once the drain looked at it again a few times.
	eventually(t, time.Minute, "the healthy Node's pod 70s past its grace period", func(ctx context.Context) (bool, string) {
		held, err := kube.CoreV1().Pods(ns).Get(ctx, "on-healthy", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return time.Since(held.DeletionTimestamp.Time) > 70*time.Second, "deleted at " + held.DeletionTimestamp.String()
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, healthy, metav1.GetOptions{})
	require.NoError(t, err, "%s waits for its pod", healthy)
	assert.Contains(t, n.Finalizers, nodesetv1alpha1.FinalizerTermination)
	msg, err := drainMessage(ctx, t, healthy)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(msg, nodecontroller.ReasonDraining+": 1 pod(s) left to evict"), msg)
}
