package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
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

// TestAutoscalerBalancedScaleUpWithinClassLimits: two NodeSets share a
// class's room, and NodeGroups gives each of them all of it as max size.
// cluster-autoscaler's --balance-similar-node-groups splits one scale-up
// between them, capping each at its own max size, and grows one right
// after the other in the same loop (or at once, --parallel-scale-up).
// Every IncreaseSize must be answered with nodes that will come: a
// refusal backs the group off (5 minutes, then longer), and a yes past
// the room leaves cluster-autoscaler waiting for nodes the controller
// never makes until its max node provision time.
func TestAutoscalerBalancedScaleUpWithinClassLimits(t *testing.T) {
	c := startControllers(t)
	for _, parallel := range []bool{false, true} {
		t.Run(fmt.Sprintf("parallel=%t", parallel), func(t *testing.T) { balancedScaleUp(t, c, parallel) })
	}
}

func balancedScaleUp(t *testing.T, c *controllers, parallel bool) {
	_, cs := clients(t)
	ctx := context.Background()
	name := "ca-balance"
	if parallel {
		name = "ca-balance-parallel"
	}
	ns := createNamespace(t, name)
	createClass(t, name, func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](4)}
	})
	createAutoscaledSet(t, ns, "a", name, 10)
	createAutoscaledSet(t, ns, "b", name, 10)
	ca := autoscalerClient(t, c)
	eventually(t, time.Minute, "both sets Accepted", func(ctx context.Context) (bool, string) {
		for _, name := range []string{"a", "b"} {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !meta.IsStatusConditionTrue(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted) {
				return false, name + " not Accepted yet"
			}
		}
		return true, ""
	})

	groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	maxSize := map[string]int32{}
	for _, g := range groups.NodeGroups {
		maxSize[g.Id] = g.MaxSize
	}
	require.Equal(t, int32(4), maxSize[ns+"/a"], "each set alone may have the class's room")
	require.Equal(t, int32(4), maxSize[ns+"/b"])

	// Pending pods need 6 nodes; balancing gives each group 3 (within its
	// max size of 4), and the executor grows them one after the other.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refused []string
	)
	for _, id := range []string{ns + "/a", ns + "/b"} {
		increase := func() {
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second) // the externalgrpc client's
			defer cancel()
			if _, err := ca.NodeGroupIncreaseSize(callCtx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 3}); err != nil {
				mu.Lock()
				refused = append(refused, id+": "+err.Error())
				mu.Unlock()
			}
		}
		if parallel {
			wg.Go(increase)
		} else {
			increase()
		}
	}
	wg.Wait()
	assert.Empty(t, refused, "no scale-up of the plan fails: a failed one backs its group off")
	replicas := map[string]int32{}
	for _, name := range []string{"a", "b"} {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		replicas[name] = *set.Spec.Replicas
	}
	t.Logf("after the balanced scale-up: replicas %v", replicas)
	assert.LessOrEqual(t, replicas["a"]+replicas["b"], int32(4), "no set is told it grows past the class's room")
	// Every node cluster-autoscaler was told of comes.
	eventually(t, 2*time.Minute, fmt.Sprintf("a has %d nodes", replicas["a"]), converged(c, t, ns, "a", int(replicas["a"])))
	eventually(t, 2*time.Minute, fmt.Sprintf("b has %d nodes", replicas["b"]), converged(c, t, ns, "b", int(replicas["b"])))
	for _, name := range []string{"a", "b"} {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, meta.IsStatusConditionTrue(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted), "%s: %v", name, set.Status.Conditions)
	}
	// Both at their max size now: cluster-autoscaler skips them ("max size
	// reached") instead of trying again.
	groups, err = ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	for _, g := range groups.NodeGroups {
		if name := strings.TrimPrefix(g.Id, ns+"/"); name != g.Id {
			assert.Equal(t, replicas[name], g.MaxSize, "%s: %s", g.Id, g.Debug)
		}
	}
}
