package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAnEvictionAsksForNoLongerAGraceThanTheMachineHas: when the machine
// goes at the drain timeout whatever is left (onTimeout: Deprovision), an
// eviction asks for a grace period that ends by then, so a tenant's pod
// that asks for hours is stopped by its kubelet before the machine goes,
// not by the machine going. A pod whose own grace period fits is evicted
// with it; with onTimeout: Cordon (a human decides after the timeout) the
// pod's own grace period stands.
func TestAnEvictionAsksForNoLongerAGraceThanTheMachineHas(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onTimeout nodesetv1alpha1.DrainTimeoutAction
		grace     *int64
		want      *int64
	}{
		{name: "an hour, 4m left", onTimeout: nodesetv1alpha1.DrainTimeoutDeprovision, grace: ptr.To[int64](3600), want: ptr.To[int64](240)},
		{name: "30s fits", onTimeout: nodesetv1alpha1.DrainTimeoutDeprovision, grace: ptr.To[int64](30)},
		{name: "unset: the default 30s fits", onTimeout: nodesetv1alpha1.DrainTimeoutDeprovision},
		{name: "Cordon keeps the pod's own", onTimeout: nodesetv1alpha1.DrainTimeoutCordon, grace: ptr.To[int64](3600)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass("sim")
			class.Spec.Drain.OnTimeout = tc.onTimeout
			node := setNode("web-a", "sim")
			node.Spec.ProviderID = "test:///web-a"
			node.DeletionTimestamp = &metav1.Time{Time: testNow}
			node.Spec.Unschedulable = true
			// The class's drain timeout is 5m: 4m are left.
			node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: testNow.Add(-time.Minute).Format(time.RFC3339)}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
				Spec:   corev1.PodSpec{NodeName: "web-a", TerminationGracePeriodSeconds: tc.grace},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node, pod)
			f.driver.machines["web-a"] = "test:///web-a"
			var evictions []*policyv1.Eviction
			f.kube.PrependReactor("create", "pods", func(action core.Action) (bool, runtime.Object, error) {
				if action.GetSubresource() != "eviction" {
					return false, nil, nil
				}
				evictions = append(evictions, action.(core.CreateAction).GetObject().(*policyv1.Eviction))
				return true, nil, nil
			})
			require.NoError(t, f.sync("web-a"))
			require.Len(t, evictions, 1)
			var got *int64
			if evictions[0].DeleteOptions != nil {
				got = evictions[0].DeleteOptions.GracePeriodSeconds
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestEvictionOptionsNeverDeleteAtOnce(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](30)}}
	options := evictionOptions(pod, 200*time.Millisecond)
	require.NotNil(t, options)
	assert.Equal(t, ptr.To[int64](1), options.GracePeriodSeconds, "0 deletes the pod without its kubelet")
	assert.Nil(t, evictionOptions(pod, 0), "no deadline, no cap")
}
