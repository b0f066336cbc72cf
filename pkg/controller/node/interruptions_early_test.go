package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("spot")})
			ctx := context.Background()
			early := newEarlyWarnings(maxEarlyWarnings)
			require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, tc.notice, early))
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
	f := newFixture(t, nil)
	early := newEarlyWarnings(maxEarlyWarnings)
	for _, n := range []drivers.Interruption{
		{Kind: drivers.InterruptionSpot, MachineIDs: []string{"i-0hib"}, Notice: testNow, Deadline: testNow, Detail: "hibernate"},
		{Kind: drivers.InterruptionStateChange, MachineIDs: []string{"i-0stop"}, Notice: testNow, Deadline: testNow, Detail: "stopping"},
		{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0hook"}, Notice: testNow, Deadline: testNow.Add(time.Hour),
			Lifecycle: &drivers.LifecycleAction{Group: "not-ours", Hook: "h", Token: "t", MachineID: "i-0hook"}},
		{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0other"}, Notice: testNow, Deadline: testNow.Add(time.Hour), Detail: "another-hook"},
	} {
		require.NoError(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, n, early))
	}
	assert.Zero(t, early.len())
}

// TestKeptWarningsAreCappedOldestFirst: whoever may send to the queue may
// name instances nobody has. The warnings kept are capped, the oldest
// dropped first, and a warning given again keeps its place.
func TestKeptWarningsAreCappedOldestFirst(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	early := newEarlyWarnings(3)
	for i := range 5 {
		require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, spotWarning(fmt.Sprintf("i-0flood%d", i), testNow), early))
		if i == 2 {
			// Given again: it keeps its place, and is the first to go.
			require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, spotWarning("i-0flood2", testNow), early))
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
	f := newFixture(t, nil)
	ctx := context.Background()
	early := newEarlyWarnings(maxEarlyWarnings)
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, spotWarning("i-0slow", testNow), early))
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
