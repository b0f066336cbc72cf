package plan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestScaleDownMidRolloutRemovesSurplusNewNodes: a NodeSet of 4 with
// maxSurge 100% made 4 Nodes of a new template that do not come up (a bad
// image), then is scaled to 1. Its bound is then 1 + 1 Nodes: the old
// Node keeps the set available, and the new Nodes beyond replicas go (not
// Ready, they cost no availability), as a Deployment scales its new
// ReplicaSet down to replicas.
func TestScaleDownMidRolloutRemovesSurplusNewNodes(t *testing.T) {
	set := rollingSet(4, intstr.FromString("100%"), intstr.FromInt32(0))
	f := &fleet{}
	for range 4 {
		f.add("old", true)
	}
	p := Decide(set, "new", f.nodes, testNow)
	require.Equal(t, 4, p.Create, "the surge")
	f.apply(p, "new") // the new Nodes never become Ready

	set.Spec.Replicas = ptr.To[int32](1)
	for round := 0; round < 10; round++ {
		f.apply(Decide(set, "new", f.nodes, testNow), "new")
		f.dropTerminating()
	}
	total, available, current := f.counts("new")
	assert.LessOrEqual(t, total, 2, "at most replicas + maxSurge Nodes (%d of the new template)", current)
	assert.Equal(t, 1, available, "the old Node stays until a new one is available")
}

// TestPauseMidRolloutKeepsTheNodesAsTheyAre: a rollout paused right after
// its surge Node was made stops where it is: neither the new Node (booting
// or Ready) nor an outdated one is deleted. A scale-down while paused
// still goes on.
func TestPauseMidRolloutKeepsTheNodesAsTheyAre(t *testing.T) {
	for _, ready := range []bool{false, true} {
		set := rollingSet(3, intstr.FromInt32(1), intstr.FromInt32(0))
		f := &fleet{}
		for range 3 {
			f.add("old", true)
		}
		p := Decide(set, "new", f.nodes, testNow)
		require.Equal(t, 1, p.Create)
		f.add("new", ready)
		set.Spec.Paused = true
		assert.Equal(t, Plan{}, Decide(set, "new", f.nodes, testNow), "paused with the new Node Ready=%v", ready)

		set.Spec.Replicas = ptr.To[int32](2)
		p = Decide(set, "new", f.nodes, testNow)
		assert.Len(t, p.Remove, 1, "scaled down while paused: one Node goes (Ready=%v)", ready)
		assert.Zero(t, p.Create)
	}
}

// dropTerminating lets every drain finish.
func (f *fleet) dropTerminating() {
	kept := f.nodes[:0]
	for _, n := range f.nodes {
		if n.DeletionTimestamp == nil {
			kept = append(kept, n)
		}
	}
	f.nodes = kept
}
