package nodeset

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
