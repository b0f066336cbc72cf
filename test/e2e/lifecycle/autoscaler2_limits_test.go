package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestAutoscalerMaxSizeWithinClassLimits: cluster-autoscaler caps a
// scale-up at the max size NodeGroups gives, and skips a group that is at
// it; an IncreaseSize refused past the class's limits is a failed scale-up
// that adds nothing and backs the group off. So NodeGroups gives the size
// the class's limits let the set grow to, and cluster-autoscaler's
// scale-up, so capped, is carried out.
func TestAutoscalerMaxSizeWithinClassLimits(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-limits")
	createClass(t, "ca-limits", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](4)}
	})
	createSet(t, ns, "fixed", "ca-limits", 1)
	createAutoscaledSet(t, ns, "pool", "ca-limits", 10)
	eventually(t, 2*time.Minute, "fixed node", converged(c, t, ns, "fixed", 1))
	ca := autoscalerClient(t, c)
	id := ns + "/pool"

	maxSize := func() int32 {
		groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
		require.NoError(t, err)
		for _, g := range groups.NodeGroups {
			if g.Id == id {
				t.Logf("NodeGroups: %s max %d (%s)", g.Id, g.MaxSize, g.Debug)
				return g.MaxSize
			}
		}
		t.Fatalf("node group %s not listed", id)
		return 0
	}
	// Pending pods need 5 nodes of the set: cluster-autoscaler asks for
	// min(0 + 5, max size) - 0.
	size := maxSize()
	assert.Equal(t, int32(3), size, "maxNodes 4, one node of another set")
	increase := min(5, size)
	_, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: increase})
	require.NoError(t, err, "cluster-autoscaler's capped scale-up")
	eventually(t, 2*time.Minute, fmt.Sprintf("%d nodes", increase), converged(c, t, ns, "pool", int(increase)))
	target, err := ca.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: id})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, target.TargetSize, maxSize(), "at its max size: cluster-autoscaler skips the group, no failed scale-up")

	// The other set scaled to zero frees its node: the room comes back.
	scale(t, ns, "fixed", 0)
	eventually(t, 2*time.Minute, "fixed set gone to zero", converged(c, t, ns, "fixed", 0))
	assert.Equal(t, int32(4), maxSize())
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(10), set.Spec.Autoscaling.MaxReplicas, "the NodeSet is not changed")
}
