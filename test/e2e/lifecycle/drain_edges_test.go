package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
)

// drainingNode makes a set of one Node of a new class (drain timeout
// drainTimeout) in namespace ns, runs onNode with the Node's name, deletes
// the Node and waits until its drain started (or, with nothing to hold it,
// ended). It returns the Node's name.
func drainingNode(t *testing.T, c *controllers, ns, class, set string, drainTimeout time.Duration,
	onNode func(node string)) string {
	t.Helper()
	kube, _ := clients(t)
	ctx := context.Background()
	createClass(t, class, func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: drainTimeout}}
	})
	createSet(t, ns, set, class, 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, set, 1))
	nodes, err := setNodes(ctx, t, ns, set)
	require.NoError(t, err)
	node := nodes[0].Name
	onNode(node)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "drain started", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "" // a drain with nothing to hold it may be over already
		}
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.Unschedulable && n.Annotations[nodesetv1alpha1.AnnotationDrainStarted] != "", "not cordoned yet"
	})
	return node
}

// drainMessage is the message of the Node's Draining condition.
func drainMessage(ctx context.Context, t *testing.T, node string) (string, error) {
	kube, _ := clients(t)
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == nodecontroller.DrainCondition {
			return cond.Reason + ": " + cond.Message, nil
		}
	}
	return "", fmt.Errorf("no %s condition", nodecontroller.DrainCondition)
}

// TestAnEvictionTheAPIServerRefusesIsTold: a pod under two
// PodDisruptionBudgets cannot be evicted (the API server answers 500: the
// Eviction API supports one budget per pod). The drain says so on the Node,
// in its Draining condition and an EvictionFailed Event, not only "1 pod(s)
// left to evict" until the timeout. Once the budgets are fixed the retried
// eviction goes through and the drain ends.
func TestAnEvictionTheAPIServerRefusesIsTold(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "twobudgets")
	var pod string
	node := drainingNode(t, c, ns, "twobudgets-sim", "doubly", 2*time.Minute, func(node string) {
		pod = guardedPod(t, ns, "doubly-guarded", node, "first")
		_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "second"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(0)),
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"guarded-by": "first"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		setBudgetStatus(t, ns, "second", 1, 1)
	})
	const twoBudgets = "more than one PodDisruptionBudget"
	eventually(t, time.Minute, "the refusal told in the Draining condition", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(msg, twoBudgets) && strings.Contains(msg, ns+"/"+pod), msg
	})
	eventuallyEvent(t, node, nodecontroller.ReasonEvictionFailed)
	_, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err, "the API server refused the eviction")

	// One budget left, which allows the disruption: the next try evicts.
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "first", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(msg, err)
	})
	reasons := eventuallyEvent(t, node, nodecontroller.ReasonDrained)
	assert.NotContains(t, reasons, nodecontroller.ReasonDrainTimedOut, "the drain ended once the eviction went through")
}

// TestAFinalizerRemovedByHandLeaksNoMachine: an admin who removes the
// termination finalizer of a Node whose drain is held by a budget
// (kubectl patch) lets the Node go before its machine. The machine is not
// leaked: no Node accounts for it, and orphan collection deletes it (and
// tells the NodeSet); the NodeSet gets its replacement.
func TestAFinalizerRemovedByHandLeaksNoMachine(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "byhand")
	node := drainingNode(t, c, ns, "byhand-sim", "unheld", 10*time.Minute, func(node string) {
		guardedPod(t, ns, "held", node, "holds")
	})
	_, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the Node gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	eventually(t, 2*time.Minute, "its machine collected", func(ctx context.Context) (bool, string) {
		all, ok := c.machines(ctx)
		if !ok {
			return false, "node controller not answering /debug/machines"
		}
		_, has := setMachines(all, ns, "unheld")[node]
		return !has, "machine " + node + " still runs"
	})
	reasons := eventuallyEvent(t, "unheld", nodecontroller.ReasonOrphanMachineDeleted)
	assert.True(t, slices.Contains(reasons, nodecontroller.ReasonOrphanMachineDeleted))
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "holds", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "replaced", converged(c, t, ns, "unheld", 1))
}

// TestDrainMovesWhatKubectlDrainMoves: as `kubectl drain --force
// --delete-emptydir-data --ignore-daemonsets` would, the drain evicts a pod
// with no controller and a pod with an emptyDir volume, leaves the pods of
// a DaemonSet, and does not wait for them: the Node goes without reaching
// its drain timeout.
func TestDrainMovesWhatKubectlDrainMoves(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "kubectlike")
	var bare, scratch string
	node := drainingNode(t, c, ns, "kubectlike-sim", "likekubectl", 5*time.Minute, func(node string) {
		labels := map[string]string{"app": "agent"}
		_, err := kube.AppsV1().DaemonSets(ns).Create(ctx, daemonSet(ns, "agent", node, labels), metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, time.Minute, "the DaemonSet's pod on the node", func(ctx context.Context) (bool, string) {
			pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
			if err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 1 && pods.Items[0].Spec.NodeName == node, fmt.Sprintf("%d pods", len(pods.Items))
		})
		bare = runPod(t, ns, "bare", node, nil)
		_, err = kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "scratch"},
			Spec: corev1.PodSpec{
				NodeName:    node,
				Containers:  []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
				Volumes:     []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		scratch = "scratch"
	})
	eventually(t, time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	reasons := eventuallyEvent(t, node, nodecontroller.ReasonDrained)
	assert.NotContains(t, reasons, nodecontroller.ReasonDrainTimedOut, "the DaemonSet's pod did not hold the drain")
	for _, pod := range []string{bare, scratch} {
		_, err := kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s was evicted: %v", pod, err)
	}
	require.NoError(t, kube.AppsV1().DaemonSets(ns).Delete(ctx, "agent", metav1.DeleteOptions{}))
}

// daemonSet runs a pod with labels on node only (and on no other test's
// Nodes), tolerating every taint, as node agents do.
func daemonSet(namespace, name, node string, labels map[string]string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
							MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
						}}},
					}},
					Containers:  []corev1.Container{{Name: "agent", Image: "registry.k8s.io/pause:3.10"}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
}

// TestAVolumeThatNeverDetachesLeavesTheNodeForAHuman: with
// drain.waitForVolumeDetach and onTimeout: Cordon, a volume still attached
// when the drain timeout runs out is a timed-out drain: the Node stays
// cordoned with its machine, DrainTimedOut says why; the machine does not
// go at the timeout as if the drain had finished. Once the volume is
// detached, it goes.
func TestAVolumeThatNeverDetachesLeavesTheNodeForAHuman(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "stuckvolume")
	createClass(t, "stuckvolume-sim", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 3 * time.Second},
			OnTimeout: nodesetv1alpha1.DrainTimeoutCordon, WaitForVolumeDetach: true}
	})
	createSet(t, ns, "attached", "stuckvolume-sim", 1)
	eventually(t, 2*time.Minute, "1 node", converged(c, t, ns, "attached", 1))
	nodes, err := setNodes(ctx, t, ns, "attached")
	require.NoError(t, err)
	node := nodes[0].Name
	// As the attach/detach controller reports a volume it attached.
	attach := func(volumes []corev1.AttachedVolume) {
		patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesAttached": volumes}})
		require.NoError(t, err)
		_, err = kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
		require.NoError(t, err)
	}
	attach([]corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs.csi.aws.com^vol-0123", DevicePath: "/dev/xvdba"}})
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}))

	eventually(t, time.Minute, "the drain timed out on the volume", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(msg, nodecontroller.ReasonDrainTimedOut+": ") && strings.Contains(msg, "1 volume(s) still attached"), msg
	})
	eventuallyEvent(t, node, nodecontroller.ReasonDrainTimedOut)
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err, "left for a human")
	assert.Contains(t, n.Finalizers, nodesetv1alpha1.FinalizerTermination)
	all, ok := c.machines(ctx)
	require.True(t, ok)
	assert.Contains(t, setMachines(all, ns, "attached"), node, "the machine stays while the volume is attached")

	attach(nil)
	eventually(t, 2*time.Minute, "the Node gone once the volume detached", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	eventually(t, 2*time.Minute, "replaced", converged(c, t, ns, "attached", 1))
}
