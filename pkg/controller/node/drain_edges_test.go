package node

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

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

// TestATerminatingPodOnANodeThatIsNotReadyDoesNotHoldTheDrain: an evicted
// pod keeps its deletionTimestamp until its kubelet confirms it is gone; on
// a Node that is not Ready (Ready Unknown: unreachable; False; or never
// reported) none will. Once the pod is more than a minute past its grace
// period the drain stops waiting for it and the machine goes, well before
// the drain timeout. On a Ready Node the same pod still holds the drain.
func TestATerminatingPodOnANodeThatIsNotReadyDoesNotHoldTheDrain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready corev1.ConditionStatus // "": no Ready condition
		waits bool
	}{
		{name: "unreachable", ready: corev1.ConditionUnknown},
		{name: "NotReady", ready: corev1.ConditionFalse},
		{name: "never reported", ready: ""},
		{name: "Ready", ready: corev1.ConditionTrue, waits: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"},
				Spec:   corev1.PodSpec{NodeName: "web-a", TerminationGracePeriodSeconds: ptr.To[int64](30)},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			f := deletedNodeFixture(t, pod)
			node := f.get("web-a")
			if tc.ready != "" {
				node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: tc.ready}}
			}
			require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, ""))
			f.updateCache(node)
			evictions := 0
			f.onEviction(func() error {
				// As the API server does: the pod is marked for deletion at
				// the end of its grace period and stays until a kubelet
				// confirms it.
				evictions++
				evicted := pod.DeepCopy()
				evicted.DeletionTimestamp = &metav1.Time{Time: f.now.Add(30 * time.Second)}
				evicted.DeletionGracePeriodSeconds = ptr.To[int64](30)
				return f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), evicted, "team-a")
			})

			require.NoError(t, f.sync("web-a"))
			require.Equal(t, 1, evictions)
			// Within the grace period and the minute after it, the drain waits
			// on any Node: a kubelet may still be stopping the pod.
			f.now = testNow.Add(89 * time.Second)
			require.NoError(t, f.sync("web-a"))
			assert.Empty(t, f.driver.deletes, "a minute past the grace period is not over")
			assert.Equal(t, ReasonDraining, drainCondition(f.get("web-a")).Reason)

			f.now = testNow.Add(91 * time.Second)
			require.NoError(t, f.sync("web-a"))
			assert.Equal(t, 1, evictions, "a terminating pod is not evicted again")
			cond := drainCondition(f.get("web-a"))
			require.NotNil(t, cond)
			if tc.waits {
				assert.Empty(t, f.driver.deletes, "a Ready Node's kubelet confirms the pod's deletion: the drain waits for it")
				assert.Equal(t, ReasonDraining, cond.Reason)
				assert.Contains(t, cond.Message, "1 pod(s) left to evict")
				return
			}
			assert.Equal(t, []string{"web-a"}, f.driver.deletes, "deprovisioned long before the drain timeout of 5m")
			assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
			assert.Equal(t, ReasonDrained, cond.Reason)
			assert.Contains(t, cond.Message, "1 terminating for over 1m0s past their grace period")
			events := f.events()
			assert.Equal(t, 1, countPrefix(events, "Normal "+ReasonDrained+" "), "%v", events)
			assert.Zero(t, countPrefix(events, "Warning "+ReasonDrainTimedOut+" "), "%v", events)
		})
	}
}

// TestLongestRunningDrainIsOneNodes: the gauge NodeDrainStuck reads is the
// age of a set's oldest drain under way, not whether the set has some Node
// draining: a Node that just started draining next to one that drained for
// 40 minutes does not lower it, a set whose Nodes are not draining has no
// series, and a released Node (finalizer gone, another one still holding it)
// is no drain.
func TestLongestRunningDrainIsOneNodes(t *testing.T) {
	draining := func(name, set string, started time.Duration, finalizers ...string) *corev1.Node {
		node := setNode(name, "sim")
		node.Labels[nodesetv1alpha1.LabelNodeSet] = set
		node.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-started)}
		node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: time.Now().Add(-started).UTC().Format(time.RFC3339)}
		node.Finalizers = finalizers
		return node
	}
	nodes := []*corev1.Node{
		draining("old-a", "web", 40*time.Minute, nodesetv1alpha1.FinalizerTermination),
		draining("new-a", "web", time.Minute, nodesetv1alpha1.FinalizerTermination),
		draining("new-b", "api", 2*time.Minute, nodesetv1alpha1.FinalizerTermination),
		draining("released", "db", time.Hour, "example.com/other"),
		setNode("running", "sim"),
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		require.NoError(t, indexer.Add(n))
	}
	registry := prometheus.NewRegistry()
	NewMetrics(registry, func() corelisters.NodeLister { return corelisters.NewNodeLister(indexer) })
	families, err := registry.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, family := range families {
		if family.GetName() != "nodeset_longest_running_drain_seconds" {
			continue
		}
		for _, m := range family.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "nodeset" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	require.Len(t, got, 3, "%v", got)
	assert.InDelta(t, (40 * time.Minute).Seconds(), got["web"], 5)
	assert.InDelta(t, (2 * time.Minute).Seconds(), got["api"], 5)
	assert.Zero(t, got["db"], "released: no drain under way, a series at zero")
}

// TestAFailedReleaseIsRetriedAlone: once the driver has confirmed the
// machine gone, a release the API server refused is retried by itself. The
// drain is not run again (its pod list, its Drained Event, its duration
// observed twice), nor the machine deleted again.
func TestAFailedReleaseIsRetriedAlone(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: "web-a"}}
	f := deletedNodeFixture(t, pod)
	f.onEviction(func() error {
		return f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "team-a", "app")
	})
	require.NoError(t, f.sync("web-a"), "cordoned, the pod evicted")
	refuse := true
	f.kube.PrependReactor("patch", "nodes", func(action core.Action) (bool, runtime.Object, error) {
		patch := action.(core.PatchAction)
		if refuse && strings.Contains(string(patch.GetPatch()), "/metadata/finalizers") {
			refuse = false
			return true, nil, apierrors.NewServiceUnavailable("the API server is busy")
		}
		return false, nil, nil
	})
	require.Error(t, f.sync("web-a"), "drained and deprovisioned, the release refused")
	assert.Equal(t, []string{"web-a"}, f.driver.deletes)
	assert.Contains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
	podLists := func() (n int) {
		for _, a := range f.kube.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
				n++
			}
		}
		for _, c := range f.drainCalls {
			if c == "list pods" {
				n++
			}
		}
		return n
	}
	lists := podLists()
	require.NotZero(t, lists, "the drain listed the Node's pods")

	require.NoError(t, f.sync("web-a"))
	assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination, "released")
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "the machine is not deleted again")
	assert.Equal(t, lists, podLists(), "nor the Node drained again")
	var observed dto.Metric
	require.NoError(t, f.controller.metrics.drains.WithLabelValues(drainDrained).(prometheus.Histogram).Write(&observed))
	assert.Equal(t, uint64(1), observed.GetHistogram().GetSampleCount(), "one drain observed")
	var drained int
	for _, e := range f.events() {
		if strings.Contains(e, " "+ReasonDrained+" ") {
			drained++
		}
	}
	assert.Equal(t, 1, drained, "one Drained Event")
}

// TestVolumesOfPodsNotWaitedForDoNotHoldTheDrain: kube-controller-manager's
// attach/detach controller keeps a pod's volumes attached until a kubelet
// reports the pod terminated (DetermineVolumeAction, IsPodTerminated), so
// the volumes of a pod left terminating on a Node that is not Ready (its
// machine dead: reclaimed, or deleted by a cloud controller manager) stay
// in status.volumesAttached while the pod exists, and the pod exists until
// the Node is gone. With drain.waitForVolumeDetach the drain does not wait
// for them: the machine goes at once, not at the drain timeout, and with
// onTimeout: Cordon not never. A volume on a Node whose pods all went is
// still waited for.
func TestVolumesOfPodsNotWaitedForDoNotHoldTheDrain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		onTimeout nodesetv1alpha1.DrainTimeoutAction
		pod       bool
		waits     bool
	}{
		{name: "Cordon", onTimeout: nodesetv1alpha1.DrainTimeoutCordon, pod: true},
		{name: "Deprovision", onTimeout: nodesetv1alpha1.DrainTimeoutDeprovision, pod: true},
		{name: "no pod left", onTimeout: nodesetv1alpha1.DrainTimeoutCordon, waits: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass("sim")
			class.Spec.Drain.WaitForVolumeDetach = true
			class.Spec.Drain.OnTimeout = tc.onTimeout
			node := setNode("web-a", "sim")
			node.Spec.ProviderID = "test:///web-a"
			node.DeletionTimestamp = &metav1.Time{Time: testNow.Add(-3 * time.Minute)}
			node.Spec.Unschedulable = true
			node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: testNow.Add(-3 * time.Minute).Format(time.RFC3339)}
			// As kube-controller-manager marks a Node whose kubelet stopped
			// posting its status.
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}}
			node.Status.VolumesAttached = []corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs.csi.aws.com^vol-1", DevicePath: ""}}
			objects := []runtime.Object{node}
			if tc.pod {
				// Evicted at the drain's start; its kubelet never confirmed it.
				objects = append(objects, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "team-a", CreationTimestamp: metav1.Time{Time: testNow.Add(-time.Hour)},
						DeletionTimestamp: &metav1.Time{Time: testNow.Add(-150 * time.Second)}, DeletionGracePeriodSeconds: ptr.To[int64](30)},
					Spec: corev1.PodSpec{NodeName: "web-a", Volumes: []corev1.Volume{{Name: "data",
						VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "db",
						State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
				})
			}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{class}, objects...)
			f.driver.machines["web-a"] = "test:///web-a"
			f.onEviction(func() error {
				t.Error("a terminating pod is not evicted again")
				return nil
			})

			require.NoError(t, f.sync("web-a"))
			if tc.waits {
				assert.Empty(t, f.driver.deletes, "a volume no pod holds may still detach: waited for within the timeout")
				cond := drainCondition(f.get("web-a"))
				require.NotNil(t, cond)
				assert.Equal(t, ReasonDraining, cond.Reason)
				assert.Contains(t, cond.Message, "waiting for 1 volume(s) to detach")
				return
			}
			assert.Equal(t, []string{"web-a"}, f.driver.deletes, "deprovisioned two minutes before the drain timeout of 5m")
			assert.NotContains(t, f.get("web-a").Finalizers, nodesetv1alpha1.FinalizerTermination)
			cond := drainCondition(f.get("web-a"))
			require.NotNil(t, cond)
			assert.Equal(t, ReasonDrained, cond.Reason)
			assert.Contains(t, cond.Message, "1 terminating for over 1m0s past their grace period")
			assert.Contains(t, cond.Message, "1 volume(s) still attached, not waited for")
			events := f.events()
			assert.Zero(t, countPrefix(events, "Warning "+ReasonDrainTimedOut+" "), "%v", events)
		})
	}
}
