package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAVolumeStillAttachedAtTheTimeoutIsATimedOutDrain: with
// drain.waitForVolumeDetach, a volume that is still attached when the drain
// timeout runs out ends the drain as a timeout, not as a drain that
// finished: DrainTimedOut (condition and Event), and drain.onTimeout
// decides, so Cordon keeps the machine for a human.
func TestAVolumeStillAttachedAtTheTimeoutIsATimedOutDrain(t *testing.T) {
	for _, tc := range []struct {
		name        string
		onTimeout   nodesetv1alpha1.DrainTimeoutAction
		deprovision bool
	}{
		{name: "Cordon leaves the machine", onTimeout: nodesetv1alpha1.DrainTimeoutCordon},
		{name: "Deprovision removes it anyway", onTimeout: nodesetv1alpha1.DrainTimeoutDeprovision, deprovision: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass("sim")
			class.Spec.Drain.WaitForVolumeDetach = true
			class.Spec.Drain.OnTimeout = tc.onTimeout
			node := setNode("web-a", "sim")
			node.Spec.ProviderID = "test:///web-a"
			node.DeletionTimestamp = &metav1.Time{Time: testNow}
			node.Spec.Unschedulable = true
			node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: testNow.Add(-6 * time.Minute).Format(time.RFC3339)}
			node.Status.VolumesAttached = []corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs^vol-1", DevicePath: "/dev/xvdb"}}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, node)
			f.driver.machines["web-a"] = "test:///web-a"

			require.NoError(t, f.sync("web-a"))
			events := f.events()
			assert.Equal(t, 1, countPrefix(events, "Warning "+ReasonDrainTimedOut+" "), "%v", events)
			assert.Zero(t, countPrefix(events, "Normal "+ReasonDrained+" "), "the volume never detached: %v", events)
			if tc.deprovision {
				assert.Equal(t, []string{"web-a"}, f.driver.deletes)
				return
			}
			assert.Empty(t, f.driver.deletes, "onTimeout: Cordon never deprovisions")
			got := f.get("web-a")
			assert.Contains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination)
			cond := drainCondition(got)
			require.NotNil(t, cond)
			assert.Equal(t, ReasonDrainTimedOut, cond.Reason)
			assert.Contains(t, cond.Message, "1 volume(s) still attached")
		})
	}
}

// TestAFailedEvictionIsTold: an eviction the API server refuses for another
// reason than a budget (500 for a pod under two PodDisruptionBudgets, 403
// in a namespace being deleted) is retried like a refused one, and its
// reason is told on the Node: an EvictionFailed Event and the Draining
// condition, not only a log line.
func TestAFailedEvictionIsTold(t *testing.T) {
	const twoBudgets = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	evictions := 0
	f.onEviction(func() error {
		evictions++
		// As the API server answers it: a Status of code 500, no reason.
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500, Message: twoBudgets}}
	})
	require.NoError(t, f.sync("web-a"))
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, 2, evictions, "retried on each look")
	assert.Empty(t, f.driver.deletes, "within the timeout the machine waits")
	cond := drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDraining, cond.Reason)
	assert.Contains(t, cond.Message, "team-a/app")
	assert.Contains(t, cond.Message, twoBudgets)
	events := f.events()
	assert.Positive(t, countPrefix(events, "Warning "+ReasonEvictionFailed+" "), "%v", events)
	assert.Zero(t, countPrefix(events, "Warning "+ReasonEvictionBlocked+" "), "no budget refused it: %v", events)
}

// TestAnEvictionInADeletedNamespaceIsWaitedFor: the API server forbids
// evictions in a namespace being deleted; its namespace controller deletes
// the pods. The drain waits for them, tells why the eviction failed, and
// ends once the pod is gone.
func TestAnEvictionInADeletedNamespaceIsWaitedFor(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	f.onEviction(func() error {
		err := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "app",
			assert.AnError)
		err.ErrStatus.Message = "pods \"app\" is forbidden: unable to create new content in namespace team-a because it is being terminated"
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause, Message: "namespace team-a is being terminated"}}
		return err
	})
	require.NoError(t, f.sync("web-a"))
	assert.Empty(t, f.driver.deletes)
	assert.Contains(t, drainCondition(f.get("web-a")).Message, "being terminated")

	// The namespace controller deletes the pod.
	require.NoError(t, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "team-a", "app"))
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	assert.Equal(t, ReasonDrained, drainCondition(f.get("web-a")).Reason)
}

// TestANodeDeletedWhileItsMachineIsMadeTakesTheMachine: a Node deleted
// while its machine is made but its providerID not yet written (the wait
// for the kubelet) goes through the deletion path like any other: the
// machine is deleted by the Node's name, then the Node released; nothing
// is made again.
func TestANodeDeletedWhileItsMachineIsMadeTakesTheMachine(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	f.controller.opts.ProviderIDWait = 10 * time.Second
	require.NoError(t, f.sync("web-a"))
	require.Equal(t, 1, f.driver.creates)
	require.Empty(t, f.get("web-a").Spec.ProviderID, "waiting for the kubelet")

	deleted := f.get("web-a")
	deleted.DeletionTimestamp = &metav1.Time{Time: f.now}
	require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), deleted, ""))
	f.updateCache(deleted)
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "the machine goes by the Node's name")
	assert.Empty(t, f.driver.machines)
	assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
	assert.Equal(t, 1, f.driver.creates, "nothing made again")
}
