package node

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAPodPlacedOnTheCordonedNodeDoesNotHoldTheDrain: a pod created well
// after the drain started was placed on the cordoned Node (it tolerates
// node.kubernetes.io/unschedulable, or its controller names the Node), and
// its controller would place it there again at each eviction. As kubectl
// drain, which waits only for the pods it listed after the cordon, the
// drain neither evicts it nor waits for it. A pod created before the drain,
// or within the margin after its start (clock skew, a scheduler's cache),
// is evicted and waited for.
func TestAPodPlacedOnTheCordonedNodeDoesNotHoldTheDrain(t *testing.T) {
	started := testNow.Add(-3 * time.Minute) // the drain timeout is 5m
	pod := func(name string, created time.Time) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", CreationTimestamp: metav1.NewTime(created)},
			Spec: corev1.PodSpec{NodeName: "web-a",
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	before := pod("before", started.Add(-time.Hour))
	near := pod("near", started.Add(arrivalMargin))
	came := pod("came-back", started.Add(arrivalMargin+time.Second))
	// Scheduled while a human had the Node uncordoned (the drain's start
	// is kept, the cordon put back): an ordinary pod, which does not
	// tolerate the cordon.
	uncordoned := pod("while-uncordoned", started.Add(time.Minute))
	uncordoned.Spec.Tolerations = []corev1.Toleration{{Key: "example.com/gpu", Operator: corev1.TolerationOpExists}}
	f := deletedNodeFixture(t, before, near, came, uncordoned)
	node := f.get("web-a")
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: started.Format(time.RFC3339)}
	require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, ""))
	f.updateCache(node)
	var evicted []string
	f.kube.PrependReactor("create", "pods", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evicted = append(evicted, action.(core.CreateAction).GetObject().(*policyv1.Eviction).Name)
		return true, nil, nil
	})

	require.NoError(t, f.sync("web-a"))
	slices.Sort(evicted)
	assert.Equal(t, []string{"before", "near", "while-uncordoned"}, evicted, "the pod placed on the cordoned Node is not evicted")
	assert.Empty(t, f.driver.deletes, "the pods from before the cordon are waited for")
	assert.Contains(t, drainCondition(f.get("web-a")).Message, "3 pod(s) left to evict")

	// The pods from before are gone; the one that came after still runs.
	for _, name := range []string{"before", "near", "while-uncordoned"} {
		require.NoError(t, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "team-a", name))
	}
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "drained without waiting for the pod that came after the cordon")
	cond := drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDrained, cond.Reason)
	assert.Contains(t, cond.Message, "1 pod(s) created after the drain started")
	events := f.events()
	assert.Zero(t, countPrefix(events, "Warning "+ReasonDrainTimedOut+" "), "%v", events)
}

// TestWhichTolerationsTakeTheCordon: a pod is taken for one placed on the
// cordoned Node only when one of its tolerations tolerates
// node.kubernetes.io/unschedulable:NoSchedule by the scheduler's own rule.
func TestWhichTolerationsTakeTheCordon(t *testing.T) {
	key := corev1.TaintNodeUnschedulable
	for _, c := range []struct {
		name       string
		toleration corev1.Toleration
		tolerates  bool
	}{
		{"the key, Exists", corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists}, true},
		{"the key, Exists, NoSchedule", corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}, true},
		{"the key, Equal to empty", corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual}, true},
		{"the key, no operator", corev1.Toleration{Key: key}, true},
		{"every key, Exists", corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		{"the key, Equal to a value", corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: "true"}, false},
		{"the key, NoExecute", corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{"the key, PreferNoSchedule", corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectPreferNoSchedule}, false},
		{"every key, NoExecute", corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		{"another key", corev1.Toleration{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{c.toleration}}}
			assert.Equal(t, c.tolerates, toleratesCordon(pod))
		})
	}
	assert.False(t, toleratesCordon(&corev1.Pod{}), "a pod without tolerations")
}

// TestAPodItsControllerNamesTheNodeForDoesNotHoldTheDrain: a pod whose
// spec.nodeName its creator gave (its managed fields own the field) skips
// the scheduler, and the kubelet admits it on the cordoned Node whatever
// its tolerations: created well after the drain started, it was put back
// by a controller the cordon does not stop, and is neither evicted nor
// waited for. One the scheduler bound (no managed-fields entry owns
// spec.nodeName) and that does not tolerate the cordon came while the
// Node was uncordoned: evicted and waited for.
func TestAPodItsControllerNamesTheNodeForDoesNotHoldTheDrain(t *testing.T) {
	started := testNow.Add(-3 * time.Minute)
	created := started.Add(time.Minute)
	named := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "named", Namespace: "team-a", CreationTimestamp: metav1.NewTime(created),
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:containers":{},"f:nodeName":{}}}`),
			}}},
		Spec:   corev1.PodSpec{NodeName: "web-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	bound := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: "team-a", CreationTimestamp: metav1.NewTime(created),
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:containers":{}}}`),
			}, {
				// The kubelet's status: a subresource, never the placement.
				Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
				FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:nodeName":{}}}`),
			}}},
		Spec:   corev1.PodSpec{NodeName: "web-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	f := deletedNodeFixture(t, named, bound)
	node := f.get("web-a")
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDrainStarted: started.Format(time.RFC3339)}
	require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), node, ""))
	f.updateCache(node)
	var evicted []string
	f.kube.PrependReactor("create", "pods", func(action core.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evicted = append(evicted, action.(core.CreateAction).GetObject().(*policyv1.Eviction).Name)
		return true, nil, nil
	})

	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"bound"}, evicted, "the pod that names the Node is not evicted")
	assert.Contains(t, drainCondition(f.get("web-a")).Message, "1 pod(s) left to evict")

	require.NoError(t, f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "team-a", "bound"))
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, []string{"web-a"}, f.driver.deletes, "drained without waiting for the pod that names the Node")
	cond := drainCondition(f.get("web-a"))
	require.NotNil(t, cond)
	assert.Equal(t, ReasonDrained, cond.Reason)
	assert.Contains(t, cond.Message, "1 pod(s) created after the drain started")
}

// TestWhichManagedFieldsNameTheNode: only an entry of the pod itself (no
// subresource) that owns spec.nodeName says its creator named the Node.
func TestWhichManagedFieldsNameTheNode(t *testing.T) {
	entry := func(subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	for _, c := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		names   bool
	}{
		{"none", nil, false},
		{"created with it", []metav1.ManagedFieldsEntry{entry("", `{"f:spec":{"f:nodeName":{}}}`)}, true},
		{"applied with it", []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{},"f:spec":{"f:nodeName":{}}}`)}}, true},
		{"another field of the spec", []metav1.ManagedFieldsEntry{entry("", `{"f:spec":{"f:nodeSelector":{}}}`)}, false},
		{"nodeName elsewhere", []metav1.ManagedFieldsEntry{entry("", `{"f:metadata":{"f:nodeName":{}}}`)}, false},
		{"a subresource's entry", []metav1.ManagedFieldsEntry{entry("status", `{"f:spec":{"f:nodeName":{}}}`)}, false},
		{"undecodable", []metav1.ManagedFieldsEntry{entry("", `{"f:spec":`)}, false},
		{"no fields", []metav1.ManagedFieldsEntry{{Manager: "m"}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ManagedFields: c.entries}}
			assert.Equal(t, c.names, namesItsNode(pod))
		})
	}
}
