package nodeset

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestARelabelledNodeIsNoReplicaOfTheSetItClaims: a Node sealed for
// another namespace's set, relabelled by its kubelet as a Node of this
// one, is not one of its replicas: the set neither scales down for it
// (it would delete one of its own) nor counts it in its status.
func TestARelabelledNodeIsNoReplicaOfTheSetItClaims(t *testing.T) {
	class := validClass("sim")
	set := newSet(1)
	own := setNode(t, set, class, "web-own", 2*time.Hour, true)
	intruder := setNode(t, set, class, "web-intruder", time.Hour, true)
	intruder.Labels[nodesetv1alpha1.LabelSeal] = nodeutil.SetSeal(&nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: "attacker", Name: "web"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim"}})
	f := newFixture(t, class, set, own, intruder)
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeDeletes(), "the set keeps its own Node")
	assert.Empty(t, f.nodeCreates())
	assert.Equal(t, int32(1), f.status().Replicas)
}

// TestASetWaitsForItsRelabelledNode: a Node of the set that its kubelet
// relabelled (into another namespace's set, or another class) is no
// replica while so, but the set makes no replacement for it, and deletes
// nothing, until its labels are back: a replacement would be one Node too
// many then.
func TestASetWaitsForItsRelabelledNode(t *testing.T) {
	for _, tt := range []struct{ key, value string }{
		{nodesetv1alpha1.LabelNodeSetNamespace, "victim"},
		{nodesetv1alpha1.LabelNodeClass, "other"},
	} {
		t.Run(tt.key, func(t *testing.T) {
			class := validClass("sim")
			set := newSet(2)
			kept := setNode(t, set, class, "web-kept", 2*time.Hour, true)
			strayed := setNode(t, set, class, "web-strayed", time.Hour, true)
			strayed.Labels[tt.key] = tt.value
			f := newFixture(t, class, set, kept, strayed)
			require.NoError(t, f.sync())
			assert.Empty(t, f.nodeCreates(), "no replacement while the labels are not back")
			assert.Empty(t, f.nodeDeletes(), "and nothing deleted: not the Node of another class as one of an earlier set")

			// Put back: a Node of the set again, and nothing to make.
			strayed = strayed.DeepCopy()
			strayed.Labels[tt.key] = map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: "team-a", nodesetv1alpha1.LabelNodeClass: "sim"}[tt.key]
			require.NoError(t, f.controller.nodeIndexer.Update(strayed))
			require.NoError(t, f.sync())
			assert.Empty(t, f.nodeCreates())
			assert.Empty(t, f.nodeDeletes())
			assert.Equal(t, int32(2), f.status().Replicas)
		})
	}
}

// TestARelabelledNodeStillCountsForItsClassLimit: a Node relabelled out of
// a limited class still holds its place in the class's limits, so that no
// other set of the class gets its room.
func TestARelabelledNodeStillCountsForItsClassLimit(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](2)}
	set := newSet(2)
	kept := setNode(t, set, class, "web-kept", 2*time.Hour, true)
	strayed := setNode(t, set, class, "web-strayed", time.Hour, true)
	strayed.Labels[nodesetv1alpha1.LabelNodeClass] = "other"
	f := newFixture(t, class, set, kept, strayed)
	count, err := f.controller.ClassCount(class)
	require.NoError(t, err)
	assert.Equal(t, int64(2), count.Class)
	assert.Equal(t, int64(2), count.Usage("elsewhere", "").Class)
}

// TestADeletedClassIsHeldByItsRelabelledStaticNode: a static Node of a
// class (sealed for the class alone) whose kubelet relabelled it into
// another class still holds its own class's deletion: its machine is the
// class's to drain and deprovision once its labels are put back.
func TestADeletedClassIsHeldByItsRelabelledStaticNode(t *testing.T) {
	class := validClass("sim")
	class.Finalizers = []string{nodesetv1alpha1.FinalizerInUse}
	class.DeletionTimestamp = ptr.To(metav1.NewTime(testNow))
	set := newSet(1)
	set.Spec.NodeClassName = "other"
	static := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "static-1", Finalizers: []string{nodesetv1alpha1.FinalizerTermination},
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "other", nodesetv1alpha1.LabelSeal: nodeutil.Seal("", "", "sim")}}}
	f := newFixture(t, class, set, static)
	patched := false
	f.nodesets.PrependReactor("patch", "nodeclasses", func(core.Action) (bool, runtime.Object, error) {
		patched = true
		return true, class, nil
	})
	require.NoError(t, f.controller.syncClassProtection(context.Background(), "sim"))
	assert.False(t, patched, "the class's in-use finalizer is kept while its relabelled static Node is there")
	require.Len(t, f.recorder.Events, 1)
	assert.Contains(t, <-f.recorder.Events, "Node static-1")
}

// TestANodeAKubeletRegisteredIsNoReplica: a kubelet may register its own
// Node with a set's labels and nodeset's finalizer, but not with a seal.
// Made after its class began sealing its Nodes (status.sealedSince), such
// a Node is no replica from the moment it appears: the set neither scales
// down for it nor counts it, and makes the Node it lacks. Made before,
// while sealedSince is not past, it is an earlier release's, and a
// replica; once sealedSince is past, it is not.
func TestANodeAKubeletRegisteredIsNoReplica(t *testing.T) {
	for _, tt := range []struct {
		name     string
		replicas int32
		since    time.Duration // sealedSince, from now
		creates  int
		deletes  int
		counted  int32
	}{
		{name: "one too many for the set", replicas: 1, since: -3 * time.Hour, counted: 1},
		{name: "one too few", replicas: 2, since: -3 * time.Hour, creates: 1, counted: 1},
		{name: "made before sealedSince, not past yet", replicas: 1, since: time.Minute, deletes: 1, counted: 2},
		{name: "made before sealedSince, past", replicas: 1, since: -time.Minute, counted: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			class := validClass("sim")
			class.Status.SealedSince = &metav1.Time{Time: testNow.Add(tt.since)}
			set := newSet(tt.replicas)
			own := setNode(t, set, class, "web-own", 4*time.Hour, true)
			own.Labels[nodesetv1alpha1.LabelSeal] = nodeutil.SetSeal(set)
			registered := setNode(t, set, class, "web-registered", time.Hour, true)
			delete(registered.Labels, nodesetv1alpha1.LabelSeal)
			f := newFixture(t, class, set, own, registered)
			require.NoError(t, f.sync())
			assert.Len(t, f.nodeCreates(), tt.creates)
			assert.Len(t, f.nodeDeletes(), tt.deletes)
			assert.Equal(t, tt.counted, f.status().Replicas)
		})
	}
}
