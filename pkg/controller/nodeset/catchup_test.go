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
