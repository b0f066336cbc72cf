package plan

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestRolloutBoundsHoldThroughEditsAndScaling changes the template again,
// or the replicas, in the middle of a rollout. Every plan must create only
// within replicas + maxSurge and remove only while replicas -
// maxUnavailable stay available (or as many as there were), and the
// rollout must end with every Node of the last template.
func TestRolloutBoundsHoldThroughEditsAndScaling(t *testing.T) {
	type change struct {
		round    int
		hash     string
		replicas int32
	}
	for _, tt := range []struct {
		name               string
		surge, unavailable intstr.IntOrString
		changes            []change
		wantReplicas       int
	}{
		{"second template change", intstr.FromInt32(1), intstr.FromInt32(0), []change{{round: 3, hash: "newer"}}, 6},
		{"second template change, unavailable 2", intstr.FromInt32(1), intstr.FromInt32(2), []change{{round: 1, hash: "newer"}}, 6},
		{"scale up", intstr.FromInt32(1), intstr.FromInt32(0), []change{{round: 3, replicas: 10}}, 10},
		{"scale down", intstr.FromInt32(1), intstr.FromInt32(0), []change{{round: 3, replicas: 2}}, 2},
		{"scale down, percentages", intstr.FromString("25%"), intstr.FromString("25%"), []change{{round: 2, replicas: 3}}, 3},
		{"scale down then change again", intstr.FromInt32(2), intstr.FromInt32(1), []change{{round: 2, replicas: 3}, {round: 4, hash: "newer"}}, 3},
		{"scale to zero", intstr.FromInt32(1), intstr.FromInt32(0), []change{{round: 3, replicas: 0}}, 0},
	} {
		for _, split := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s,split=%v", tt.name, split), func(t *testing.T) {
				set := rollingSet(6, tt.surge, tt.unavailable)
				f := &fleet{}
				for range 6 {
					f.add("old", true)
				}
				hash := "new"
				for round := 0; round < 80; round++ {
					for _, c := range tt.changes {
						if c.round == round {
							if c.hash != "" {
								hash = c.hash
							} else {
								set.Spec.Replicas = ptr.To(c.replicas)
							}
						}
					}
					replicas := int(Replicas(set))
					surge, unavailable := Bounds(set, replicas)
					totalBefore, availableBefore, _ := f.counts(hash)
					p := Decide(set, hash, f.nodes, testNow)
					f.apply(p, hash)
					total, available, _ := f.counts(hash)
					if p.Create > 0 {
						require.LessOrEqual(t, total, replicas+surge, "round %d: created beyond replicas+maxSurge", round)
					}
					require.LessOrEqual(t, total, max(totalBefore, replicas+surge), "round %d", round)
					require.GreaterOrEqual(t, available, min(availableBefore, replicas-unavailable),
						"round %d: removed below replicas-maxUnavailable available", round)
					f.settle(split)
				}
				total, available, current := f.counts(hash)
				assert.Equal(t, [3]int{tt.wantReplicas, tt.wantReplicas, tt.wantReplicas}, [3]int{total, available, current}, "rolled out")
			})
		}
	}
}

// TestAFlappedNodeIsNotAvailable: a new Node Ready again for less than
// minReadySeconds after a NotReady spell does not let an old one go.
func TestAFlappedNodeIsNotAvailable(t *testing.T) {
	set := rollingSet(2, intstr.FromInt32(1), intstr.FromInt32(0))
	set.Spec.MinReadySeconds = 30
	f := &fleet{}
	f.add("old", true)
	f.add("old", true)
	f.add("new", true)
	f.nodes[2].Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(testNow.Add(-10 * time.Second))}}
	p := Decide(set, "new", f.nodes, testNow)
	assert.Empty(t, p.Remove, "Ready again 10s ago, minReadySeconds 30")
	assert.Zero(t, p.Create, "the surge is used")
	p = Decide(set, "new", f.nodes, testNow.Add(20*time.Second))
	assert.Len(t, p.Remove, 1, "Ready 30s: available")
}

// TestReadyOutdatedNodesCostAvailability: outdated Nodes Ready for less
// than minReadySeconds are not available yet, but they are Ready and run
// pods. With maxUnavailable 0 they stay until their replacements are
// available; only Nodes that are not Ready go for free.
func TestReadyOutdatedNodesCostAvailability(t *testing.T) {
	set := rollingSet(3, intstr.FromInt32(1), intstr.FromInt32(0))
	set.Spec.MinReadySeconds = 30
	f := &fleet{}
	for range 3 {
		f.add("old", true)
	}
	for _, n := range f.nodes {
		n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(testNow.Add(-10 * time.Second))
	}
	p := Decide(set, "new", f.nodes, testNow)
	assert.Equal(t, 1, p.Create, "the surge")
	assert.Zero(t, len(p.Remove), "Ready outdated Nodes go only once their replacements are available")

	f.apply(p, "new")
	f.nodes[0].Status.Conditions[0].Status = corev1.ConditionFalse // an old Node fails
	p = Decide(set, "new", f.nodes, testNow)
	require.Len(t, p.Remove, 1, "a Node that is not Ready costs nothing")
	assert.Equal(t, f.nodes[0].Name, p.Remove[0].Name)

	// Once the old Nodes and the new one are available, one old Node goes.
	f.settle(false)
	p = Decide(set, "new", f.nodes, testNow.Add(time.Minute))
	assert.Len(t, p.Remove, 1)
}
