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
