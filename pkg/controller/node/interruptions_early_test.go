package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// appear adds a Node to the fixture's API server and cache, as the group's
// sync makes it.
func (f *fixture) appear(node *corev1.Node) {
	f.t.Helper()
	_, err := f.kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.NoError(f.t, err)
	f.updateCache(node)
}

func (f *fixture) interrupted(name string) bool {
	f.t.Helper()
	_, err := f.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) // the fake deletes at once
}

// unknownNotices is nodeset_interruption_messages_unknown_machine_total.
func (f *fixture) unknownNotices() float64 {
	f.t.Helper()
	var m dto.Metric
	require.NoError(f.t, f.controller.metrics.interruptionsNotOurs.Write(&m))
	return m.GetCounter().GetValue()
}

// receivedNotices is nodeset_interruptions_received_total of kind.
func (f *fixture) receivedNotices(kind drivers.InterruptionKind) float64 {
	f.t.Helper()
	var m dto.Metric
	require.NoError(f.t, f.controller.metrics.interruptions.WithLabelValues(string(kind)).Write(&m))
	return m.GetCounter().GetValue()
}

func spotWarning(instance string, notice time.Time) drivers.Interruption {
	return drivers.Interruption{Kind: drivers.InterruptionSpot, MachineIDs: []string{instance}, Notice: notice, Deadline: notice.Add(2 * time.Minute)}
}

// TestAWarningBeforeItsNodeIsActedOnWhenTheNodeAppears: a warning for a
// machine whose Node is not there yet is kept until its deadline; a Node
// that appears before then is acted on as on receipt, one that appears
// after is left alone (AWS took the machine already).
func TestAWarningBeforeItsNodeIsActedOnWhenTheNodeAppears(t *testing.T) {
	rebalance := func(instance string) drivers.Interruption {
		return drivers.Interruption{Kind: drivers.InterruptionRebalance, MachineIDs: []string{instance}, Notice: testNow}
	}
	tainted := func(f *fixture, name string) bool {
		return slices.ContainsFunc(f.get(name).Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodesetv1alpha1.TaintRebalanceRecommended })
	}
	for _, tc := range []struct {
		name     string
		notice   drivers.Interruption
		appearAt time.Duration
		acted    func(f *fixture, name string) bool
		want     bool
	}{
		{"a spot warning, its Node within the two minutes", spotWarning("i-0new", testNow), 90 * time.Second, (*fixture).interrupted, true},
		{"a spot warning, its Node after the two minutes", spotWarning("i-0new", testNow), 2*time.Minute + time.Second, (*fixture).interrupted, false},
		{"a spot warning delivered late, its Node after the deadline", spotWarning("i-0new", testNow.Add(-100*time.Second)), 30 * time.Second, (*fixture).interrupted, false},
		{"a rebalance recommendation, its Node within the hold", rebalance("i-0new"), earlyWarningHold - time.Second, tainted, true},
		{"a rebalance recommendation, its Node after the hold", rebalance("i-0new"), earlyWarningHold, tainted, false},
		{"a scheduled change days ahead, its Node after the hold", drivers.Interruption{Kind: drivers.InterruptionScheduled,
			MachineIDs: []string{"i-0new"}, Notice: testNow, Deadline: testNow.Add(72 * time.Hour)}, earlyWarningHold + time.Second, (*fixture).interrupted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newQueueFixture(t)
			ctx := context.Background()
			early := newEarlyWarnings(maxEarlyWarnings)
			require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, tc.notice, early), errKeptEarly,
				"kept, and not to be acknowledged")
			f.controller.actOnEarlyWarnings(ctx, early) // no Node yet: nothing to do
			assert.Empty(t, f.kube.Actions(), "a warning kept for its Node costs no write")

			f.now = testNow.Add(tc.appearAt)
			f.appear(groupNode("late", nodesetv1alpha1.DriverEKSASG, "i-0new"))
			f.controller.actOnEarlyWarnings(ctx, early)
			assert.Equal(t, tc.want, tc.acted(f, "late"))
			assert.Zero(t, early.len(), "acted on or expired, it is forgotten")
		})
	}
}

// TestAWarningWithNoTimeLeftIsNotKept: a hibernation starts at once, and a
// stop or termination happens now: there is nothing to drain ahead of. An
// Auto Scaling termination (nodeset's hook or another's) is not kept
// either: no Node is made for an instance its group terminates.
func TestAWarningWithNoTimeLeftIsNotKept(t *testing.T) {
	f := newQueueFixture(t)
	early := newEarlyWarnings(maxEarlyWarnings)
	for _, n := range []drivers.Interruption{
		{Kind: drivers.InterruptionSpot, MachineIDs: []string{"i-0hib"}, Notice: testNow, Deadline: testNow, Detail: "hibernate"},
		{Kind: drivers.InterruptionStateChange, MachineIDs: []string{"i-0stop"}, Notice: testNow, Deadline: testNow, Detail: "stopping"},
		{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0hook"}, Notice: testNow, Deadline: testNow.Add(time.Hour),
			Lifecycle: &drivers.LifecycleAction{Group: "not-ours", Hook: "h", Token: "t", MachineID: "i-0hook"}},
		{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0other"}, Notice: testNow, Deadline: testNow.Add(time.Hour), Detail: "another-hook"},
	} {
		require.NoError(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, testQueue, n, early))
	}
	assert.Zero(t, early.len())
}

// TestKeptWarningsAreCappedOldestFirst: whoever may send to the queue may
// name instances nobody has. The warnings kept are capped, the oldest
// dropped first, and a warning given again keeps its place.
func TestKeptWarningsAreCappedOldestFirst(t *testing.T) {
	f := newQueueFixture(t)
	ctx := context.Background()
	early := newEarlyWarnings(3)
	for i := range 5 {
		require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, spotWarning(fmt.Sprintf("i-0flood%d", i), testNow), early), errKeptEarly)
		if i == 2 {
			// Given again: it keeps its place, and is the first to go.
			require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, spotWarning("i-0flood2", testNow), early), errKeptEarly)
		}
	}
	assert.Equal(t, 3, early.len(), "no more than the cap")
	live, _ := early.kept(testNow)
	var machines []string
	for _, w := range live {
		machines = append(machines, w.key.machine)
	}
	assert.Equal(t, []string{"i-0flood2", "i-0flood3", "i-0flood4"}, machines, "the oldest were dropped")

	f.appear(groupNode("first", nodesetv1alpha1.DriverEKSASG, "i-0flood0"))
	f.appear(groupNode("last", nodesetv1alpha1.DriverEKSASG, "i-0flood4"))
	f.controller.actOnEarlyWarnings(ctx, early)
	assert.False(t, f.interrupted("first"), "a dropped warning is not acted on")
	assert.True(t, f.interrupted("last"))
	assert.Equal(t, 2, early.len())
}

// TestAKeptWarningWhoseActionFailsIsTriedAgain: a write refused when the
// Node appears leaves the warning kept for the next round.
func TestAKeptWarningWhoseActionFailsIsTriedAgain(t *testing.T) {
	f := newQueueFixture(t)
	ctx := context.Background()
	early := newEarlyWarnings(maxEarlyWarnings)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, spotWarning("i-0slow", testNow), early), errKeptEarly)
	refuse := true
	f.kube.PrependReactor("patch", "nodes", func(core.Action) (bool, runtime.Object, error) {
		if refuse {
			return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return false, nil, nil
	})
	f.appear(groupNode("slow", nodesetv1alpha1.DriverEKSASG, "i-0slow"))
	f.controller.actOnEarlyWarnings(ctx, early)
	assert.False(t, f.interrupted("slow"))
	assert.Equal(t, 1, early.len(), "kept: the write was refused")
	refuse = false
	f.controller.actOnEarlyWarnings(ctx, early)
	assert.True(t, f.interrupted("slow"))
	assert.Zero(t, early.len())
}

// TestAKeptWarningOutlivesAChangeOfLeader: a warning kept for its Node is
// not acknowledged, so its message comes again after the visibility
// timeout, to whoever leads then. The new leader keeps it from the queue's
// first delivery, not from its own: a rebalance recommendation (kept for
// earlyWarningHold) first delivered nine minutes ago has one minute left,
// and its message is acknowledged, as for no NodeSet's machine, once that
// minute is up.
func TestAKeptWarningOutlivesAChangeOfLeader(t *testing.T) {
	f := newQueueFixture(t)
	ctx := context.Background()
	warning := spotWarning("i-0handover", testNow)
	warning.Received = testNow
	old := newEarlyWarnings(maxEarlyWarnings)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warning, old), errKeptEarly,
		"kept, its message not acknowledged")

	// The leader goes, and its memory with it; the message comes again
	// to the next one, whose Node appears within the two minutes.
	f.now = testNow.Add(40 * time.Second)
	next := newEarlyWarnings(maxEarlyWarnings)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warning, next), errKeptEarly)
	f.now = testNow.Add(90 * time.Second)
	f.appear(groupNode("handover", nodesetv1alpha1.DriverEKSASG, "i-0handover"))
	f.controller.actOnEarlyWarnings(ctx, next)
	assert.True(t, f.interrupted("handover"), "the next leader drains the Node")

	rebalance := drivers.Interruption{Kind: drivers.InterruptionRebalance, MachineIDs: []string{"i-0nobody"}, Notice: testNow, Received: testNow}
	unknown := f.unknownNotices()
	f.now = testNow.Add(9 * time.Minute)
	later := newEarlyWarnings(maxEarlyWarnings)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, rebalance, later), errKeptEarly)
	live, _ := later.kept(f.now)
	require.Len(t, live, 1)
	assert.Equal(t, testNow.Add(earlyWarningHold), live[0].until, "kept from the first delivery")
	f.now = testNow.Add(earlyWarningHold)
	f.controller.actOnEarlyWarnings(ctx, later)
	assert.Zero(t, later.len(), "expired")
	assert.Equal(t, unknown, f.unknownNotices(), "counted when its message goes")
	assert.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, rebalance, later), "expired: acknowledged")
	assert.Equal(t, unknown+1, f.unknownNotices(), "for no NodeSet's machine, once")
}

// TestAWarningActedOnIsAcknowledgedWhenItComesAgain: once the Node that
// appeared is drained, the warning's message comes once more and is
// acknowledged, even when the Node is gone by then and nothing tells it
// from a warning that came first.
func TestAWarningActedOnIsAcknowledgedWhenItComesAgain(t *testing.T) {
	f := newQueueFixture(t)
	ctx := context.Background()
	early := newEarlyWarnings(maxEarlyWarnings)
	warning := spotWarning("i-0twice", testNow)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warning, early), errKeptEarly)
	f.now = testNow.Add(30 * time.Second)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warning, early), errKeptEarly, "come again, kept still")
	f.appear(groupNode("twice", nodesetv1alpha1.DriverEKSASG, "i-0twice"))
	f.controller.actOnEarlyWarnings(ctx, early)
	require.True(t, f.interrupted("twice"))
	f.deleteCache("twice")
	writes := len(f.kube.Actions())
	f.now = testNow.Add(60 * time.Second)
	assert.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warning, early), "acted on: acknowledged")
	assert.Equal(t, writes, len(f.kube.Actions()), "and not acted on again")
	assert.Zero(t, early.len())
	assert.Equal(t, 1.0, f.receivedNotices(drivers.InterruptionSpot), "one notice, delivered three times")
	assert.Zero(t, f.unknownNotices())
}

// TestAWarningForAMachineTerminatedLatelyIsNotKept: a notice that comes
// again after its Node was drained and its machine terminated (or is sent
// twice) waits for no Node: that machine will have none again.
func TestAWarningForAMachineTerminatedLatelyIsNotKept(t *testing.T) {
	f := newQueueFixture(t)
	early := newEarlyWarnings(maxEarlyWarnings)
	f.controller.rememberTerminated("aws:///us-west-2a/i-0gone")
	assert.NoError(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, testQueue, spotWarning("i-0gone", testNow), early))
	assert.Zero(t, early.len())
	assert.Equal(t, 1.0, f.unknownNotices(), "for no NodeSet's machine")
	assert.ErrorIs(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, testQueue, spotWarning("i-0gone2", testNow), early), errKeptEarly,
		"another machine's is kept")
}

// TestANoticeComesAgainAndIsCountedOnce: a rebalance recommendation
// (Taint: its Node stays) delivered again, its acknowledgement late, finds
// its Node tainted already and is not counted again; another notice is,
// and so is the same id once its time is up.
func TestANoticeComesAgainAndIsCountedOnce(t *testing.T) {
	f := newQueueFixture(t)
	ctx := context.Background()
	early := newEarlyWarnings(maxEarlyWarnings)
	f.appear(groupNode("stays", nodesetv1alpha1.DriverEKSASG, "i-0stays"))
	notice := drivers.Interruption{ID: "event-1", Kind: drivers.InterruptionRebalance, MachineIDs: []string{"i-0stays"}, Notice: testNow}
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, notice, early))
	f.updateCache(f.get("stays"))
	assert.True(t, slices.ContainsFunc(f.get("stays").Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodesetv1alpha1.TaintRebalanceRecommended }))
	f.now = testNow.Add(10 * time.Second)
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, notice, early))
	assert.Equal(t, 1.0, f.receivedNotices(drivers.InterruptionRebalance), "one notice, delivered twice")

	other := notice
	other.ID = "event-2"
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, other, early))
	assert.Equal(t, 2.0, f.receivedNotices(drivers.InterruptionRebalance), "another notice")

	f.now = testNow.Add(earlyWarningHold + time.Second)
	early.kept(f.now)
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, notice, early))
	assert.Equal(t, 3.0, f.receivedNotices(drivers.InterruptionRebalance), "its time up, the id counts again")
}
