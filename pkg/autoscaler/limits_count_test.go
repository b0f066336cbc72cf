package autoscaler

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/plan"
)

// TestNodeGroupsCountsEachClassOnce: cluster-autoscaler calls NodeGroups
// every loop, and a count walks the class's Nodes. Each class is counted
// once for the whole answer, whatever the number of its sets and of those
// growing (replicas told and not made yet), not once per set for its own
// room and once more per growing set, which cost sets × Nodes. The max
// sizes are those of counting each set alone.
func TestNodeGroupsCountsEachClassOnce(t *testing.T) {
	const sets, growing = 8, 3
	class := testClass()
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](40)}
	var (
		first *nodesetv1alpha1.NodeSet
		rest  []*nodesetv1alpha1.NodeSet
		nodes []*corev1.Node
	)
	for i := range sets {
		set := acceptedSet(fmt.Sprintf("set-%d", i), 2)
		set.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 30}
		made := 2
		if i < growing {
			set.Spec.Replicas = ptr.To[int32](6) // just scaled up: 4 nodes to come
		}
		for n := range made {
			name := fmt.Sprintf("%s-%d", set.Name, n)
			nodes = append(nodes, setNode(set, name, "simulated:///"+name, true))
		}
		if first == nil {
			first = set
		} else {
			rest = append(rest, set)
		}
	}
	f := newClassFixture(t, class, nil, first, nodes...)
	for _, set := range rest {
		require.NoError(t, f.sets.Add(set))
	}
	counts := 0
	count := f.server.count
	f.server.count = func(class *nodesetv1alpha1.NodeClass) (plan.ClassCount, error) {
		counts++
		return count(class)
	}

	groups, err := f.server.NodeGroups(context.Background(), &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	require.Len(t, groups.NodeGroups, sets)
	// 16 Nodes and 3 × 4 coming: 28 of 40. A set may have its own
	// machines and growth and the 12 left.
	for _, g := range groups.NodeGroups {
		want := int32(2 + 12)
		if g.Id < fmt.Sprintf("team-a/set-%d", growing) {
			want = 6 + 12
		}
		assert.Equal(t, want, g.MaxSize, "%s: %s", g.Id, g.Debug)
	}
	assert.Equal(t, 1, counts, "counts of the class for one NodeGroups answer")
}
