package node

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestAMachineGoneRetriesTheNodeWaitingLongestForRoom: a Node whose create
// the cloud refused for want of room is tried again as soon as a machine
// of its class is deleted, one Node a machine, the longest-waiting first,
// instead of at the end of its backoff.
func TestAMachineGoneRetriesTheNodeWaitingLongestForRoom(t *testing.T) {
	gone := func(name string) *corev1.Node {
		node := setNode(name, "sim")
		node.Spec.ProviderID = "test:///" + name
		node.DeletionTimestamp = &metav1.Time{Time: testNow}
		return node
	}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim"), testClass("other")},
		setNode("other-a", "other"), setNode("web-a", "sim"), setNode("web-b", "sim"), setNode("web-c", "sim"),
		gone("old-a"), gone("old-b"))
	f.driver.machines["old-a"] = "test:///old-a"
	f.driver.machines["old-b"] = "test:///old-b"
	f.driver.createErr = fmt.Errorf("no room for sim.small: %w", drivers.ErrOutOfCapacity)
	for _, name := range []string{"other-a", "web-b", "web-a", "web-c"} {
		require.Error(t, f.sync(name))
		f.now = f.now.Add(time.Second)
	}
	// web-b waits longest, but its last create failed for another reason.
	f.driver.createErr = errors.New("the image is gone")
	require.Error(t, f.sync("web-b"))
	f.driver.createErr = nil
	require.Zero(t, f.controller.queue.Len(), "a refused create waits for its backoff")

	next := func() string {
		t.Helper()
		require.Equal(t, 1, f.controller.queue.Len(), "one Node retried for one machine gone")
		name, _ := f.controller.queue.Get()
		f.controller.queue.Done(name)
		return name
	}
	require.NoError(t, f.sync("old-a"))
	require.Equal(t, []string{"old-a"}, f.driver.deletes)
	assert.Equal(t, "web-a", next(), "the Node of the class waiting longest for room, not another class's, nor one refused otherwise since")

	require.NoError(t, f.sync("web-a"))
	assert.NotEmpty(t, f.get("web-a").Spec.ProviderID)
	require.NoError(t, f.sync("old-b"))
	assert.Equal(t, "web-c", next(), "a Node that got its machine waits no more")

	// web-c is deleted before its retry: gone, it waits no more.
	require.NoError(t, f.kube.CoreV1().Nodes().Delete(t.Context(), "web-c", metav1.DeleteOptions{}))
	f.deleteCache("web-c")
	require.NoError(t, f.sync("web-c"))
	f.controller.retryWaiting("sim")
	assert.Zero(t, f.controller.queue.Len(), "no Node of the class waits for room")
	f.controller.retryWaiting("other")
	assert.Equal(t, "other-a", next())
}

// TestAnOrphanCollectedRetriesANodeWaitingForRoom: a machine no Node
// accounts for takes room too; the orphan collection that deletes it tries
// a Node of its NodeSet's class that waits for room again at once.
func TestAnOrphanCollectedRetriesANodeWaitingForRoom(t *testing.T) {
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "sim"}}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	require.NoError(t, f.setIndexer.Add(set))
	synced(f)
	f.driver.createErr = fmt.Errorf("no room for sim.small: %w", drivers.ErrOutOfCapacity)
	require.Error(t, f.sync("web-a"))
	f.driver.createErr = nil
	f.driver.machines = map[string]string{"web-orphan": "test:///web-orphan"}
	f.driver.createdAt = map[string]int64{"web-orphan": f.now.Add(-time.Hour).Unix()}

	removed, err := f.controller.CollectOrphans(t.Context(), 10*time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"web-orphan"}, removed)
	require.Equal(t, 1, f.controller.queue.Len())
	name, _ := f.controller.queue.Get()
	f.controller.queue.Done(name)
	assert.Equal(t, "web-a", name)
}

// TestANodeRefusedIsRetriedAtLeastEveryFiveMinutes: room the cloud gains by
// itself (nodeset sees no machine go) is taken by a Node that waits for it
// within five minutes however long it has waited, not after client-go's
// default cap of 1000 s; the first retries still come fast.
func TestANodeRefusedIsRetriedAtLeastEveryFiveMinutes(t *testing.T) {
	f := newFixture(t, nil)
	retries := f.controller.nodeRetries
	var delays []time.Duration
	for range 40 {
		delays = append(delays, retries.When("web-1"))
	}
	assert.Equal(t, 5*time.Millisecond, delays[0])
	assert.Less(t, delays[9], 5*time.Second, "the tenth retry")
	assert.Equal(t, 5*time.Minute, delays[16], "the 17th, which client-go's default would put 5.5 minutes off")
	assert.Equal(t, 5*time.Minute, delays[39])
	assert.Equal(t, 5*time.Millisecond, retries.When("web-2"), "each Node backs off alone")
	retries.Forget("web-1")
	assert.Equal(t, 5*time.Millisecond, retries.When("web-1"), "a sync that succeeds starts the backoff over")
}
