package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
)

// TestAPodItsControllerPutsBackDoesNotHoldTheDrain: a tenant's ReplicaSet
// whose pods name the Node (or tolerate node.kubernetes.io/unschedulable,
// which the scheduler lets onto a cordoned Node) puts a new pod on the
// draining Node each time one is evicted. kube-controller-manager's
// ReplicaSet controller does it here. The drain evicts the pod that was
// there before it started and does not wait for the ones that came after:
// the Node goes, drained, long before its drain timeout.
func TestAPodItsControllerPutsBackDoesNotHoldTheDrain(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "comesback")
	labels := map[string]string{"app": "comes-back"}
	var first string
	node := drainingNode(t, c, ns, "comesback-sim", "comesback", 4*time.Minute, func(node string) {
		_, err := kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "comes-back"},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeName:                      node,
						TerminationGracePeriodSeconds: ptr.To[int64](30),
						Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
						Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					},
				},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, time.Minute, "the ReplicaSet's pod on the node", func(ctx context.Context) (bool, string) {
			pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=comes-back"})
			if err != nil {
				return false, err.Error()
			}
			if len(pods.Items) != 1 {
				return false, fmt.Sprintf("%d pods", len(pods.Items))
			}
			first = pods.Items[0].Name
			return true, ""
		})
	})
	eventually(t, 5*time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	reasons := eventuallyEvent(t, node, nodecontroller.ReasonDrained)
	assert.NotContains(t, reasons, nodecontroller.ReasonDrainTimedOut, "the pods put back on the Node did not hold the drain")
	_, err := kube.CoreV1().Pods(ns).Get(ctx, first, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the pod from before the drain was evicted: %v", err)
	require.NoError(t, kube.AppsV1().ReplicaSets(ns).Delete(ctx, "comes-back", metav1.DeleteOptions{}))
}

// TestAPodItsControllerNamesTheNodeForDoesNotHoldTheDrain: a ReplicaSet
// whose pods name the Node and do not tolerate the cordon: the scheduler
// never sees them, the kubelet admits them on the cordoned Node, and
// kube-controller-manager's ReplicaSet controller puts one back at each
// eviction. The pods it made once the drain was well under way are
// neither evicted nor waited for. A pod the scheduler binds to the Node
// then (as it would while a human had the Node uncordoned), which does not
// tolerate the cordon either, is an ordinary pod: evicted and waited for.
// A budget holds the drain meanwhile, and once it is lifted the Node goes,
// drained, long before its drain timeout.
func TestAPodItsControllerNamesTheNodeForDoesNotHoldTheDrain(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "namesnode")
	labels := map[string]string{"app": "names-node"}
	node := drainingNode(t, c, ns, "namesnode-sim", "namesnode", 10*time.Minute, func(node string) {
		guardedPod(t, ns, "held", node, "held")
		_, err := kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "names-node"},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						NodeName:                      node,
						TerminationGracePeriodSeconds: ptr.To[int64](1),
						Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
						// The simulated kubelet's NoExecute taints, not the cordon's.
						Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
					},
				},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	started, err := time.Parse(time.RFC3339, n.Annotations[nodesetv1alpha1.AnnotationDrainStarted])
	require.NoError(t, err)
	// The API server's clock says when the drain's 15 s margin after its
	// start is over: a pod the ReplicaSet made after it.
	var arrived string
	eventually(t, 2*time.Minute, "a pod of the ReplicaSet made well after the drain started", func(ctx context.Context) (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=names-node"})
		if err != nil {
			return false, err.Error()
		}
		for _, pod := range pods.Items {
			if pod.CreationTimestamp.After(started.Add(15*time.Second)) && pod.DeletionTimestamp == nil {
				arrived = pod.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items))
	})
	bindPod(t, ns, "bound", node, nil)
	eventually(t, time.Minute, "the bound pod evicted", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Pods(ns).Get(ctx, "bound", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// The look that evicted the bound pod listed the ReplicaSet's, made
	// before it: left alone.
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, arrived, metav1.GetOptions{})
	require.NoError(t, err, "the pod its controller named the Node for is not evicted")
	assert.Nil(t, pod.DeletionTimestamp, "the pod its controller named the Node for is not evicted")
	eventually(t, time.Minute, "only the budget's pod holds the drain", func(ctx context.Context) (bool, string) {
		msg, err := drainMessage(ctx, t, node)
		if err != nil {
			return false, err.Error()
		}
		return strings.HasPrefix(msg, nodecontroller.ReasonDraining+": 1 pod(s) left to evict,"), msg
	})
	_, err = kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err, "the budget still holds the drain")
	require.NoError(t, kube.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "held", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	reasons := eventuallyEvent(t, node, nodecontroller.ReasonDrained)
	assert.NotContains(t, reasons, nodecontroller.ReasonDrainTimedOut)
	require.NoError(t, kube.AppsV1().ReplicaSets(ns).Delete(ctx, "names-node", metav1.DeleteOptions{}))
}

// TestAnOrphanedDaemonSetPodIsEvicted: a DaemonSet deleted with
// propagationPolicy Orphan leaves its pod running; kube-controller-manager's
// garbage collector removes the pod's reference to it, and the pod is then
// one with no controller, which a drain evicts and waits for (kubectl drain
// --force deletes such a pod) instead of letting it go with the machine.
func TestAnOrphanedDaemonSetPodIsEvicted(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "orphanagent")
	var orphan string
	node := drainingNode(t, c, ns, "orphanagent-sim", "orphanagent", 10*time.Minute, func(node string) {
		_, err := kube.AppsV1().DaemonSets(ns).Create(ctx, daemonSet(ns, "agent", node, map[string]string{"app": "agent"}), metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, time.Minute, "the DaemonSet's pod on the node", func(ctx context.Context) (bool, string) {
			pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
			if err != nil {
				return false, err.Error()
			}
			if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != node {
				return false, fmt.Sprintf("%d pods", len(pods.Items))
			}
			orphan = pods.Items[0].Name
			return true, ""
		})
		require.NoError(t, kube.AppsV1().DaemonSets(ns).Delete(ctx, "agent",
			metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}))
		eventually(t, time.Minute, "the pod orphaned", func(ctx context.Context) (bool, string) {
			pod, err := kube.CoreV1().Pods(ns).Get(ctx, orphan, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return metav1.GetControllerOf(pod) == nil, fmt.Sprintf("owners %v", pod.OwnerReferences)
		})
	})
	eventually(t, 2*time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	reasons := eventuallyEvent(t, node, nodecontroller.ReasonDrained)
	assert.Contains(t, reasons, nodecontroller.ReasonDrainStarted, "the orphaned pod was there to evict")
	_, err := kube.CoreV1().Pods(ns).Get(ctx, orphan, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the orphaned pod was evicted: %v", err)
}
