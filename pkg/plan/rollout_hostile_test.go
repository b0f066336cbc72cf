package plan

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestGroupSizeNeverWrapsAround: spec.replicas may be 2147483647 (the
// schema's bound). A set that large with a Node being replaced or a rollout
// under way asks for more than an int32 holds: the group's size stays at
// the most an int32 holds and never wraps to a negative size.
func TestGroupSizeNeverWrapsAround(t *testing.T) {
	set := newSet(math.MaxInt32)
	replaced := node("ip-a", "team-a", "web", "new", time.Hour, true)
	replaced.Annotations = map[string]string{nodesetv1alpha1.AnnotationReplace: testNow.Format(time.RFC3339)}
	outdated := node("ip-b", "team-a", "web", "old", time.Hour, true)
	tests := []struct {
		name  string
		nodes []*corev1.Node
	}{
		{"a Node marked for replacement", []*corev1.Node{replaced}},
		{"a rollout with an outdated Node", []*corev1.Node{outdated}},
		{"both", []*corev1.Node{replaced, outdated}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.EqualValues(t, math.MaxInt32, GroupSize(set, "new", tt.nodes))
		})
	}
}
