package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// TestAnEvictionEndsItsGracePeriodByTheDrainTimeout: a tenant's pod asking
// for an hour to stop, on a Node whose machine goes at a drain timeout of
// 3 minutes whatever is left (onTimeout: Deprovision, the default), is
// evicted with a grace period that ends by the timeout: the API server
// marks it for deletion within those minutes, not in an hour.
func TestAnEvictionEndsItsGracePeriodByTheDrainTimeout(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "slowstop")
	var pods watch.Interface
	node := drainingNode(t, c, ns, "slowstop-sim", "slowstop", 3*time.Minute, func(node string) {
		created, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "slow"},
			Spec: corev1.PodSpec{
				NodeName:                      node,
				TerminationGracePeriodSeconds: ptr.To[int64](3600),
				Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pods, err = kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
		require.NoError(t, err)
	})
	defer pods.Stop()
	var marked *corev1.Pod
	timeout := time.After(2 * time.Minute)
	for marked == nil {
		select {
		case event, ok := <-pods.ResultChan():
			require.True(t, ok, "the watch ended")
			if pod, isPod := event.Object.(*corev1.Pod); isPod && pod.DeletionTimestamp != nil {
				marked = pod
			}
		case <-timeout:
			t.Fatal("the pod was never evicted")
		}
	}
	require.NotNil(t, marked.DeletionGracePeriodSeconds)
	assert.LessOrEqual(t, *marked.DeletionGracePeriodSeconds, int64(180), "the eviction's grace period ends by the drain timeout")
	eventually(t, time.Minute, "node drained and gone", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
