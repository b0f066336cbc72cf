package nodeset

import (
	"context"
	"errors"
	"io"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"

	"nodeset.dev/nodeset/pkg/plan"
)

// TestExpectationsExpire: writes the informer never shows (a Node made and
// deleted again while the watch was down) hold a set back for
// expectationsTTL at most, as in the ReplicaSet controller; an expired
// expectation neither holds room under the class's limits nor shields a
// Node from a deleted set's sweep, and the next writes start afresh.
func TestExpectationsExpire(t *testing.T) {
	const key = "team-a/web"
	all := func(string) bool { return true }
	for _, tc := range []struct {
		name   string
		expect func(*expectations)
	}{
		{"a creation", func(e *expectations) { e.expectCreations(key, 2) }},
		{"a deletion", func(e *expectations) { e.expectDeletions(key, []string{"web-a"}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := testNow
			e := newExpectations(func() time.Time { return now })
			tc.expect(e)
			assert.False(t, e.satisfied(key), "just issued")

			now = now.Add(expectationsTTL)
			assert.False(t, e.satisfied(key), "still within the TTL")

			now = now.Add(time.Second)
			assert.True(t, e.satisfied(key), "expired: the set acts again")
			assert.Empty(t, e.pendingCreations(all), "an expired creation holds no room")
			assert.False(t, e.deleting(key, "web-a"), "an expired deletion shields nothing")

			e.expectCreations(key, 1)
			assert.Equal(t, plan.Pending{key: 1}, e.pendingCreations(all), "afresh: nothing of the expired one carries over")
			assert.False(t, e.deleting(key, "web-a"))
			e.creationObserved(key)
			assert.True(t, e.satisfied(key))
		})
	}
}

// TestExpectationsClock: every new write restarts the TTL of the set's
// expectations, so a set that keeps writing is not acted on again while
// its latest writes are in flight.
func TestExpectationsClock(t *testing.T) {
	const key = "team-a/web"
	now := testNow
	e := newExpectations(func() time.Time { return now })
	e.expectCreations(key, 1)
	now = now.Add(expectationsTTL - time.Second)
	e.expectDeletions(key, []string{"web-a"})
	now = now.Add(2 * time.Second)
	assert.False(t, e.satisfied(key), "the deletion restarted the clock")
	assert.True(t, e.deleting(key, "web-a"))
	e.deletionObserved(key, "web-a")
	e.creationObserved(key)
	assert.True(t, e.satisfied(key))
}

type afterRecorder struct {
	workqueue.TypedRateLimitingInterface[string]
	after map[string]time.Duration
}

func (q *afterRecorder) AddAfter(key string, d time.Duration) {
	if old, ok := q.after[key]; !ok || d < old {
		q.after[key] = d
	}
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

// TestAWaitingSetIsLookedAtWhenItsExpectationsExpire: a creation the
// informer never shows (the Node made and deleted while the watch was
// down) holds the set for expectationsTTL, not until something else
// happens to it.
func TestAWaitingSetIsLookedAtWhenItsExpectationsExpire(t *testing.T) {
	f := newFixture(t, validClass("sim"), newSet(1))
	q := &afterRecorder{TypedRateLimitingInterface: f.controller.queue, after: map[string]time.Duration{}}
	f.controller.queue = q
	f.controller.expectations.expectCreations("team-a/web", 1)
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates(), "waiting")
	due, ok := q.after["team-a/web"]
	require.True(t, ok, "the set is looked at again when its expectations expire")
	assert.LessOrEqual(t, due, expectationsTTL+2*time.Second)
	assert.Greater(t, due, expectationsTTL-time.Minute, "not before they expire")
}

// TestACreateOfUnknownOutcomeIsNeverMadeTwice: the answer to a Node's
// create is lost (kube-apiserver killed in the middle of it, a 504); the
// Node may or may not be stored. Until the API server is asked for it by
// name, the set makes no other; stored, it is the set's Node; not stored,
// it is made again.
func TestACreateOfUnknownOutcomeIsNeverMadeTwice(t *testing.T) {
	lostAnswer := &url.Error{Op: "Post", URL: "https://apiserver/api/v1/nodes", Err: io.ErrUnexpectedEOF}
	for _, tc := range []struct {
		name   string
		stored bool
	}{
		{"stored, its answer lost", true},
		{"lost before it was stored", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, validClass("sim"), newSet(1))
			now := testNow
			f.controller.expectations.now = func() time.Time { return now }
			lost := true
			f.kube.PrependReactor("create", "nodes", func(action core.Action) (bool, runtime.Object, error) {
				if !lost {
					return false, nil, nil
				}
				lost = false
				if tc.stored {
					require.NoError(t, f.kube.Tracker().Add(action.(core.CreateAction).GetObject()))
				}
				return true, nil, lostAnswer
			})
			require.Error(t, f.sync())
			require.NoError(t, f.sync(), "the retry, before the informer has caught up")
			require.Len(t, f.nodeCreates(), 1, "no second create while the first is not settled")

			now = now.Add(unknownCreateSettle)
			require.NoError(t, f.sync())
			nodes, err := f.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			if tc.stored {
				assert.Len(t, f.nodeCreates(), 1, "stored: nothing made again")
				assert.Len(t, nodes.Items, 1)
				assert.False(t, f.controller.expectations.satisfied("team-a/web"), "waits for the informer to show it")
				return
			}
			assert.Len(t, f.nodeCreates(), 2, "not stored: made again")
			assert.Len(t, nodes.Items, 1)
		})
	}
}

// TestADeleteOfUnknownOutcomeTakesNoSecondVictim: the answer to a Node's
// delete is lost (a 500 after the API server stored it); the Node may or
// may not be going. Until the API server is asked for it by name, the set
// deletes no other Node in its place; going, it stays expected until the
// informer shows it; not going, it may be chosen again.
func TestADeleteOfUnknownOutcomeTakesNoSecondVictim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		carried bool
	}{
		{"carried out, its answer lost", true},
		{"lost before it was carried out", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := validClass("sim")
			set := newSet(1)
			f := newFixture(t, class, set,
				setNode(t, set, class, "web-a", time.Hour, true), setNode(t, set, class, "web-b", 2*time.Hour, true))
			now := testNow
			f.controller.expectations.now = func() time.Time { return now }
			lost := true
			f.kube.PrependReactor("delete", "nodes", func(action core.Action) (bool, runtime.Object, error) {
				if !lost {
					return false, nil, nil
				}
				lost = false
				if tc.carried {
					node, err := f.kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", action.(core.DeleteAction).GetName())
					require.NoError(t, err)
					going := node.(*corev1.Node).DeepCopy()
					going.DeletionTimestamp = &metav1.Time{Time: now}
					require.NoError(t, f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), going, ""))
				}
				return true, nil, apierrors.NewInternalError(errors.New("etcd: request timed out"))
			})
			require.Error(t, f.sync())
			require.NoError(t, f.sync(), "the retry, before the informer has caught up")
			require.Len(t, f.nodeDeletes(), 1, "no second victim while the first is not settled")

			now = now.Add(unknownCreateSettle)
			require.NoError(t, f.sync())
			if tc.carried {
				assert.Len(t, f.nodeDeletes(), 1, "carried out: nothing deleted again")
				assert.True(t, f.controller.expectations.deleting("team-a/web", f.nodeDeletes()[0]), "waits for the informer to show it")
				return
			}
			assert.Len(t, f.nodeDeletes(), 2, "not carried out: a victim is chosen again")
		})
	}
}

// TestANodeCachedBeforeItsHandlerIsCountedOnce: the informer adds a new
// Node to the cache before its handler lowers the creations expected, and
// a count of the class's machines made between the two (a scale-up
// cluster-autoscaler asks for, judged by the webhook) saw the Node twice:
// a limit refused a node it had room for. The creation's name takes it out
// of the creations; one still on its way counts.
func TestANodeCachedBeforeItsHandlerIsCountedOnce(t *testing.T) {
	class := validClass("sim")
	set := newSet(1)
	f := newFixture(t, class, set, setNode(t, set, class, "web-bcdfg", time.Minute, false))
	f.controller.expectations.expectCreations("team-a/web", 2)
	f.controller.expectations.creating("team-a/web", "web-bcdfg")
	f.controller.expectations.creating("team-a/web", "web-hjklm")
	count, err := f.controller.ClassCount(class)
	require.NoError(t, err)
	assert.EqualValues(t, 2, count.Class, "the cached Node once, and the creation on its way")
	assert.EqualValues(t, 2, count.Machines("team-a/web"))

	f.controller.expectations.nodeObserved("team-a/web", "web-bcdfg")
	count, err = f.controller.ClassCount(class)
	require.NoError(t, err)
	assert.EqualValues(t, 2, count.Class, "the same once the handler ran")
}
