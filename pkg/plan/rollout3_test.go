package plan

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAnOutdatedNodeMarkedForReplacementIsReplacedOnce: a rebalance
// recommendation (ReplaceFirst) marks an outdated Node in the middle of a
// rollout. It is going, for the rollout as for the replacement, so its
// group holds one machine for it, not two: a second one would only be
// launched to be removed as a surplus once it is Ready.
func TestAnOutdatedNodeMarkedForReplacementIsReplacedOnce(t *testing.T) {
	marked := func(n *corev1.Node) *corev1.Node {
		n.Annotations = map[string]string{nodesetv1alpha1.AnnotationReplace: testNow.Format(time.RFC3339)}
		return n
	}
	tests := []struct {
		name     string
		nodes    []*corev1.Node
		wantSize int32
	}{
		{"the last outdated Node is marked", []*corev1.Node{
			node("ip-a", "team-a", "web", "new", time.Hour, true),
			node("ip-b", "team-a", "web", "new", time.Hour, true),
			marked(node("ip-c", "team-a", "web", "old", time.Hour, true)),
		}, 4},
		{"one of three outdated Nodes is marked", []*corev1.Node{
			marked(node("ip-a", "team-a", "web", "old", time.Hour, true)),
			node("ip-b", "team-a", "web", "old", time.Hour, true),
			node("ip-c", "team-a", "web", "old", time.Hour, true),
		}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet(3)
			size := GroupSize(set, "new", tt.nodes)
			assert.EqualValues(t, tt.wantSize, size, "replicas, one machine for the marked Node, and maxSurge while Nodes that stay are outdated")

			// The group launches what it was raised to; the new Nodes come
			// up Ready. None of them is a surplus to remove.
			nodes := append([]*corev1.Node(nil), tt.nodes...)
			for i := len(nodes); i < int(size); i++ {
				nodes = append(nodes, node(fmt.Sprintf("ip-new-%d", i), "team-a", "web", "new", time.Minute, true))
			}
			for _, victim := range Decide(set, "new", nodes, testNow).Remove {
				assert.NotEqual(t, "new", victim.Labels[nodesetv1alpha1.LabelTemplateHash],
					"%s, a Node of the current template the group was raised for, is removed again", victim.Name)
			}
		})
	}
}

// TestAGroupSurgesOnlyOnceATerminatingNodeIsGone: an outdated Node of a
// group-driver set is deleted once the surge's new Node is Ready. Its machine
// is terminated with the decrement, and its Node stays until it is released.
// A raise of the group in that moment would put a fourth Node beside the
// three that replicas 2 and maxSurge 1 allow; the raise waits for the Node
// to go.
func TestAGroupSurgesOnlyOnceATerminatingNodeIsGone(t *testing.T) {
	set := newSet(2) // maxSurge 1, maxUnavailable 0
	old := node("ip-a", "team-a", "web", "old", time.Hour, true)
	current := node("ip-c", "team-a", "web", "new", time.Minute, true)
	going := terminating(node("ip-b", "team-a", "web", "old", time.Hour, true))

	assert.EqualValues(t, 3, GroupSize(set, "new", []*corev1.Node{old, old.DeepCopy()}), "the rollout's first step")
	for _, nodes := range [][]*corev1.Node{
		{going, old, current},
		{going, going.DeepCopy(), current},
	} {
		size := GroupSize(set, "new", nodes)
		assert.LessOrEqual(t, int(size)+len(nodes)-len(Active(nodes)), 3,
			"the group's Nodes with the terminating ones stay within replicas + maxSurge")
	}
	assert.EqualValues(t, 3, GroupSize(set, "new", []*corev1.Node{old, current}), "the next step once the Node is gone")
}
