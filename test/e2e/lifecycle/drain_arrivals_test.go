package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
