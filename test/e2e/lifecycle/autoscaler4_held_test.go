package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestAutoscalerScaleDownSkipsHeldSets: cluster-autoscaler drains a node
// (evicts its pods) before it calls NodeGroupDeleteNodes, and gives the
// node back when the call fails. nodeset refuses to delete the registered
// nodes of a NodeSet that is rolling out or is not Accepted, so a node of
// such a set that cluster-autoscaler found unneeded would lose its pods
// for nothing, again after every --scale-down-unneeded-time. Its only
// check before the drain that nodeset answers is the group's min size,
// from NodeGroupForNode: a node is no scale-down candidate while the
// group's target size (NodeGroupTargetSize) is not above it
// (PreFilteringScaleDownNodeProcessor and verifyMinSize in
// cluster-autoscaler 1.36).
func TestAutoscalerScaleDownSkipsHeldSets(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-held")
	other := createNamespace(t, "ca-held-other")
	createClass(t, "ca-held-roll", twoCPUs)
	createClass(t, "ca-held-only", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{ns}}
	})
	createAutoscaledSet(t, ns, "rolling", "ca-held-roll", 5)
	createAutoscaledSet(t, ns, "refused", "ca-held-only", 5)
	createAutoscaledSet(t, ns, "steady", "ca-held-roll", 5)
	for _, name := range []string{"rolling", "refused", "steady"} {
		scale(t, ns, name, 2)
	}
	for _, name := range []string{"rolling", "refused", "steady"} {
		eventually(t, 2*time.Minute, name+": two nodes", converged(c, t, ns, name, 2))
	}

	// "rolling" rolls to machines that never come up: its surge Node never
	// registers and the rollout stays under way. "steady" (same class)
	// rolls too, and is paused first: it is not rolling out.
	setPaused(t, ns, "steady")
	updateClass(t, "ca-held-roll", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Simulated.FailurePercent = ptr.To[int32](100)
	})
	// "refused" loses its class: the class no longer allows the namespace.
	updateClass(t, "ca-held-only", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.AllowedNamespaces.Namespaces = []string{other}
	})
	eventually(t, time.Minute, "rolling out, and not Accepted", func(ctx context.Context) (bool, string) {
		rolling, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "rolling", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		refused, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "refused", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(refused.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		st := rolling.Status
		return st.UpdatedReplicas >= 1 && st.Replicas > st.UpdatedReplicas && accepted != nil && accepted.Status == metav1.ConditionFalse,
			fmt.Sprintf("rolling: %d of %d updated; refused: Accepted %+v", st.UpdatedReplicas, st.Replicas, accepted)
	})

	ca := autoscalerClient(t, c)
	// One of cluster-autoscaler's loops, as far as its scale-down goes.
	_, err := ca.Refresh(ctx, &protos.RefreshRequest{})
	require.NoError(t, err)
	groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, g := range groups.NodeGroups {
		listed[g.Id] = true
	}
	for _, name := range []string{"rolling", "refused", "steady"} {
		id := ns + "/" + name
		require.True(t, listed[id], "%s listed", id)
		size, err := ca.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: id})
		require.NoError(t, err)
		nodes, err := setNodes(ctx, t, ns, name)
		require.NoError(t, err)
		candidates := 0
		for i := range nodes {
			node := &nodes[i]
			if !nodeutil.IsReady(node) || node.DeletionTimestamp != nil {
				continue
			}
			// The Node as cluster-autoscaler sends it.
			group, err := ca.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
				ProviderID: node.Spec.ProviderID, Name: node.Name, Labels: node.Labels, Annotations: node.Annotations}})
			require.NoError(t, err)
			require.Equal(t, id, group.NodeGroup.GetId(), "%s", node.Name)
			candidate := size.TargetSize > group.NodeGroup.GetMinSize()
			_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: []*protos.ExternalGrpcNode{{
				ProviderID: node.Spec.ProviderID, Name: node.Name, Labels: node.Labels}}})
			if name == "steady" {
				// Not held: a candidate, and its deletion is carried out.
				assert.True(t, candidate, "%s: target size %d, min size %d: a scale-down candidate", node.Name, size.TargetSize, group.NodeGroup.GetMinSize())
				require.NoError(t, err, "%s", node.Name)
				break // one is enough
			}
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%s: %v", node.Name, err)
			if candidate {
				candidates++
				t.Errorf("%s: Node %s is a scale-down candidate (target size %d, min size %d: %s), so cluster-autoscaler would drain it, and its deletion is refused: %v",
					id, node.Name, size.TargetSize, group.NodeGroup.GetMinSize(), group.NodeGroup.GetDebug(), err)
			}
		}
		t.Logf("%s: %d Ready nodes cluster-autoscaler would drain for nothing", id, candidates)
	}
}

// setPaused pauses the set's rollouts.
func setPaused(t *testing.T, namespace, name string) {
	t.Helper()
	_, cs := clients(t)
	set, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	set.Spec.Paused = true
	_, err = cs.NodesetV1alpha1().NodeSets(namespace).Update(context.Background(), set, metav1.UpdateOptions{})
	require.NoError(t, err)
}
