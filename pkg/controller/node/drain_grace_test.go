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

// TestAPodAlreadyTerminatingIsNamedAndBoundedByTheTimeout: a pod its owner
// deleted before the drain, with a grace period of hours, is neither
// evicted (an eviction cannot shorten the grace period its deleter chose)
// nor waited for past the drain timeout. While the drain waits, and in the
// DrainTimedOut message, it is named with the end of its grace period, so
// the admin sees what holds the Node.
func TestAPodAlreadyTerminatingIsNamedAndBoundedByTheTimeout(t *testing.T) {
	ending := testNow.Add(2 * time.Hour)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: "team-a",
			DeletionTimestamp: &metav1.Time{Time: ending}, DeletionGracePeriodSeconds: ptr.To[int64](7200),
			Finalizers: []string{"example.com/keep"}},
		Spec:   corev1.PodSpec{NodeName: "web-a", TerminationGracePeriodSeconds: ptr.To[int64](7200)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	f := deletedNodeFixture(t, pod)
	evictions := 0
	f.onEviction(func() error { evictions++; return nil })

	require.NoError(t, f.sync("web-a"))
	assert.Zero(t, evictions, "a pod already terminating is not evicted")
	cond := drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDraining, cond.Reason)
	named := "1 terminating (pod team-a/slow, its grace period ending at " + ending.UTC().Format(time.RFC3339) + ")"
	assert.Contains(t, cond.Message, named)

	f.now = testNow.Add(5*time.Minute + time.Second) // the class's drain timeout is 5m
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "the drain timeout bounds the wait")
	cond = drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDrainTimedOut, cond.Reason)
	assert.Contains(t, cond.Message, "(terminating: pod team-a/slow, its grace period ending at "+ending.UTC().Format(time.RFC3339)+")")
}
