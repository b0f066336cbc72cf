package nodeset

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// TestANewLeaderWaitsForItsCacheToShowTheNodesMade: a standby that takes
// over keeps the caches it had, and its watch may not have shown yet a
// Node the leader before it made last (a create sent up to the renew
// deadline after its last renewal; a watch reconnecting after an outage).
// Its workers wait for the cache to show every Node of a set the API
// server has: synced at once, the set would make that Node again.
func TestANewLeaderWaitsForItsCacheToShowTheNodesMade(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	f := newFixture(t, class, set)
	c := f.controller
	// Made by the previous leader: in the API server, not in this cache yet.
	made := setNode(t, set, class, "web-made1", time.Minute, true)
	require.NoError(t, f.kube.Tracker().Add(made))

	c.synced = []cache.InformerSynced{func() bool { return true }} // the informers are not run
	var looks atomic.Int64
	c.nodesSeen = func() string { looks.Add(1); return "" }
	c.queue.Add(set.Namespace + "/" + set.Name)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx, 1)
	}()
	t.Cleanup(func() { cancel(); <-done })

	waitFor(t, "the new leader compared its cache with the API server, or synced the set", func() (bool, string) {
		return looks.Load() >= 2 || len(f.nodeCreates()) > 0, fmt.Sprintf("%d looks, %d creates", looks.Load(), len(f.nodeCreates()))
	})
	require.Zero(t, len(f.nodeCreates()), "no Node is made while the cache does not show the one the previous leader made")

	// The watch delivers the Node.
	require.NoError(t, c.nodeIndexer.Add(made))
	waitFor(t, "the set synced", func() (bool, string) {
		return statusWritten(f), fmt.Sprintf("%d creates", len(f.nodeCreates()))
	})
	require.Len(t, f.nodeCreates(), 1, "one Node made, for two replicas with one made already")
}

func statusWritten(f *fixture) bool {
	for _, a := range f.nodesets.Actions() {
		if (a.Matches("update", "nodesets") || a.Matches("patch", "nodesets")) && a.GetSubresource() == "status" {
			return true
		}
	}
	return false
}

// TestACacheThatShowsAllIsCaughtUp: the comparison of the cache with a
// list of the API server's Nodes.
func TestACacheThatShowsAllIsCaughtUp(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	node := func(name, rv string) *corev1.Node {
		n := setNode(t, set, class, name, time.Minute, true)
		n.ResourceVersion = rv
		return n
	}
	for _, tt := range []struct {
		name         string
		cached       []*corev1.Node
		live         []*corev1.Node
		seen, listed string
		wantCaughtUp bool
	}{
		{name: "the same", cached: []*corev1.Node{node("a", "10")}, live: []*corev1.Node{node("a", "10")}, wantCaughtUp: true},
		{name: "a Node not seen yet", live: []*corev1.Node{node("a", "10")}},
		{name: "an older version", cached: []*corev1.Node{node("a", "9")}, live: []*corev1.Node{node("a", "10")}},
		{name: "a newer version", cached: []*corev1.Node{node("a", "11")}, live: []*corev1.Node{node("a", "10")}, wantCaughtUp: true},
		{name: "a Node gone not seen yet", cached: []*corev1.Node{node("a", "10")}},
		{name: "another Node of the name", cached: []*corev1.Node{node("a", "12")}, live: func() []*corev1.Node {
			n := node("a", "10")
			n.UID = "other"
			return []*corev1.Node{n}
		}()},
		{name: "the cache has seen past the list", live: []*corev1.Node{node("a", "10")}, seen: "21", listed: "20", wantCaughtUp: true},
		{name: "the cache has seen up to the list", live: []*corev1.Node{node("a", "10")}, seen: "20", listed: "20", wantCaughtUp: true},
		{name: "the cache has seen less than the list", live: []*corev1.Node{node("a", "10")}, seen: "19", listed: "20"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, class, set, tt.cached...)
			f.controller.nodesSeen = func() string { return tt.seen }
			live := map[string]*corev1.Node{}
			for _, n := range tt.live {
				live[n.Name] = n
			}
			behind := f.controller.cacheBehindList(live, tt.listed)
			require.Equal(t, tt.wantCaughtUp, behind == "", "behind: %q", behind)
		})
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, state := cond()
		last = state
		return ok, nil
	})
	require.NoError(t, err, "%s: %s", what, last)
}

// nodeGetCounter counts the Nodes looked up one by one.
type nodeGetCounter struct {
	corelisters.NodeLister
	gets atomic.Int64
}

func (l *nodeGetCounter) Get(name string) (*corev1.Node, error) {
	l.gets.Add(1)
	return l.NodeLister.Get(name)
}

// TestACatchUpLooksAgainOnlyAtWhatDiffered: a new leader of a fleet of
// thousands of Nodes whose cache lacks one looks at every Node once, then
// only at the one it lacks until the cache shows it: the wait costs what
// changed, not the fleet at every look.
func TestACatchUpLooksAgainOnlyAtWhatDiffered(t *testing.T) {
	const fleet = 3000
	class := validClass("sim")
	set := newSet(fleet)
	var nodes []*corev1.Node
	for i := range fleet {
		n := setNode(t, set, class, fmt.Sprintf("web-%05d", i), time.Minute, true)
		n.ResourceVersion = "10"
		nodes = append(nodes, n)
	}
	f := newFixture(t, class, set, nodes...)
	c := f.controller
	made := setNode(t, set, class, "web-made", time.Minute, true)
	made.ResourceVersion = "11"
	require.NoError(t, f.kube.Tracker().Add(made)) // in the API server, not in the cache
	counting := &nodeGetCounter{NodeLister: c.nodeLister}
	c.nodeLister = counting
	var looks atomic.Int64
	c.nodesSeen = func() string { looks.Add(1); return "" }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.catchUp(ctx, time.Minute)
	}()
	waitFor(t, "ten looks at the cache", func() (bool, string) {
		return looks.Load() >= 10, fmt.Sprintf("%d looks", looks.Load())
	})
	gets, seen := counting.gets.Load(), looks.Load()
	// One pass over the fleet (and the Node not cached, twice), then the
	// Node not cached at each look.
	require.LessOrEqual(t, gets, int64(fleet+2)+seen, "Nodes looked up in %d looks at the cache", seen)

	require.NoError(t, c.nodeIndexer.Add(made))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the catch-up did not end once the cache showed the Node")
	}
}

// catchUpFleet is a controller whose cache holds a fleet of size Nodes at
// resourceVersion 10, and the live Nodes: those and one more the cache
// lacks.
func catchUpFleet(size int) (*Controller, map[string]*corev1.Node) {
	t := &testing.T{}
	class := validClass("sim")
	set := newSet(int32(size))
	live := map[string]*corev1.Node{}
	var nodes []*corev1.Node
	for i := range size {
		n := setNode(t, set, class, fmt.Sprintf("web-%05d", i), time.Minute, true)
		n.ResourceVersion = "10"
		nodes = append(nodes, n)
		live[n.Name] = n
	}
	made := setNode(t, set, class, "web-made", time.Minute, true)
	live[made.Name] = made
	c := newFixture(t, class, set, nodes...).controller
	c.nodesSeen = func() string { return "" }
	return c, live
}

// BenchmarkACatchUpLook is one look of a waiting catch-up at a fleet of
// 5000 Nodes whose cache lacks one.
func BenchmarkACatchUpLook(b *testing.B) {
	c, live := catchUpFleet(5000)
	behind := c.cacheDifferences(live)
	b.ResetTimer()
	for b.Loop() {
		for name := range behind {
			_ = c.nodeDifference(name, live[name])
		}
	}
}

// BenchmarkACatchUpFullComparison is the comparison of the whole cache
// with a list of 5000 Nodes, done once when a catch-up starts.
func BenchmarkACatchUpFullComparison(b *testing.B) {
	c, live := catchUpFleet(5000)
	b.ResetTimer()
	for b.Loop() {
		_ = c.cacheBehindList(live, "20")
	}
}
