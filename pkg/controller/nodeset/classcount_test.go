package nodeset

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8stypes "k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// countingNodeLister counts the listings of Nodes: a count of a class's
// limits lists its Nodes once.
type countingNodeLister struct {
	corelisters.NodeLister
	lists atomic.Int64
}

func (l *countingNodeLister) List(selector labels.Selector) ([]*corev1.Node, error) {
	l.lists.Add(1)
	return l.NodeLister.List(selector)
}

// TestAClassEditCountsTheClassOnceNotOncePerSet: a limited class with many
// NodeSets, each with its Node. Editing the class syncs every one of them,
// and each weighs itself against the class's limits; the class is counted
// once for all of them, not once per set (sets × (Nodes + sets) for one
// edit). A machine of the class gone is counted again, once.
func TestAClassEditCountsTheClassOnceNotOncePerSet(t *testing.T) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("NODESET_CLASS_SETS")); err == nil {
		n = v
	}
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To(int32(n + 10))}
	var sets []*nodesetv1alpha1.NodeSet
	var nodes []*corev1.Node
	for i := range n {
		set := newSet(1)
		set.Namespace, set.Name = fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("s-%04d", i)
		set.UID = k8stypes.UID("uid-" + set.Name)
		sets = append(sets, set)
		nodes = append(nodes, setNode(t, set, class, "n-"+set.Name, time.Hour, true))
	}
	f := newFixture(t, class, sets[0], nodes...)
	c := f.controller
	c.recorder = &record.FakeRecorder{}
	for _, set := range sets[1:] {
		require.NoError(t, f.nodesets.Tracker().Add(set))
		require.NoError(t, c.nodeSetIndexer.Add(set))
	}
	lister := &countingNodeLister{NodeLister: c.nodeLister}
	c.nodeLister = lister
	// The informer is not run: its Add of the class is played here.
	c.classCounts.track(class.Name)

	edit := func() {
		c.enqueueClass(class) // what the class's update handler does
		synced := 0
		for c.queue.Len() > 0 {
			key, _ := c.queue.Get()
			require.NoError(t, c.syncNodeSet(context.Background(), key))
			c.queue.Done(key)
			c.queue.Forget(key)
			synced++
		}
		require.Equal(t, n, synced)
	}
	started := time.Now()
	edit()
	t.Logf("%d sets of one class, first sync of each: %d Node listings, %v", n, lister.lists.Load(), time.Since(started))
	for _, a := range f.nodesets.Actions() {
		if a.Matches("update", "nodesets") && a.GetSubresource() == "status" {
			set := a.(core.UpdateAction).GetObject().(*nodesetv1alpha1.NodeSet)
			accepted := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			require.NotNil(t, accepted)
			require.Equal(t, metav1.ConditionTrue, accepted.Status, "%s: %s", set.Name, accepted.Message)
		}
	}
	assert.Empty(t, f.kube.Actions(), "every set has its Node: nothing to create or delete")

	lister.lists.Store(0)
	started = time.Now()
	edit()
	t.Logf("%d sets of one class, class edited: %d Node listings, %v", n, lister.lists.Load(), time.Since(started))
	assert.LessOrEqual(t, lister.lists.Load(), int64(1), "Node listings for one class edit")

	// A machine of the class gone changes the count: counted again, once.
	gone := nodes[0]
	require.NoError(t, c.nodeIndexer.Delete(gone))
	c.nodeDeleted(gone)
	lister.lists.Store(0)
	used, err := c.ClassUsage(class, "", "")
	require.NoError(t, err)
	assert.Equal(t, int64(n-1), used.Class, "the machine gone is counted out")
	_, err = c.ClassUsage(class, "", "")
	require.NoError(t, err)
	assert.Equal(t, int64(1), lister.lists.Load())
}

// TestAKeptClassCountSeesTheCreationsOfAnotherSet: two NodeSets of a class
// with room for one more Node, the class's count kept from before. The
// first set's sync takes the room; the second's, after it, must not find
// the count it would have found before that creation.
func TestAKeptClassCountSeesTheCreationsOfAnotherSet(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](1)}
	web := newSet(1)
	f := newFixture(t, class, web)
	c := f.controller
	other := newSet(1)
	other.Namespace, other.UID = "team-b", "other-uid"
	require.NoError(t, f.nodesets.Tracker().Add(other))
	require.NoError(t, c.nodeSetIndexer.Add(other))
	c.classCounts.track(class.Name)

	used, err := c.ClassUsage(class, "", "")
	require.NoError(t, err)
	require.Equal(t, int64(0), used.Class, "counted, and kept, with the class empty")

	require.NoError(t, f.sync())
	require.Len(t, f.nodeCreates(), 1, "team-a/web takes the room")
	require.NoError(t, c.syncNodeSet(context.Background(), "team-b/web"))
	assert.Len(t, f.nodeCreates(), 1, "team-b/web finds no room: the creation not yet in the cache counts")
	got, err := f.nodesets.NodesetV1alpha1().NodeSets("team-b").Get(context.Background(), "web", metav1.GetOptions{})
	require.NoError(t, err)
	accepted := findCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, accepted)
	assert.Equal(t, ReasonLimitExceeded, accepted.Reason)

	// Once the Node is in the cache, it is counted once, not twice.
	created := f.nodeCreates()[0]
	require.NoError(t, c.nodeIndexer.Add(created))
	c.nodeAdded(created)
	used, err = c.ClassUsage(class, "", "")
	require.NoError(t, err)
	assert.Equal(t, int64(1), used.Class)
}
