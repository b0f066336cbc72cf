package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// caGroupSize counts a group as cluster-autoscaler's clusterstate does:
// registered, the Nodes NodeGroupForNode puts in it; unregistered, the
// fake nodes (name and provider ID the instance id) of the instances of
// NodeGroupNodes no Node carries, expected to register (not deleting, no
// error), that NodeGroupForNode puts in it.
func caGroupSize(ctx context.Context, t *testing.T, ca protos.CloudProviderClient, id string) (registered int, unregistered []*protos.ExternalGrpcNode) {
	t.Helper()
	kube, _ := clients(t)
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	providerIDs := map[string]bool{}
	for _, n := range nodes.Items {
		providerIDs[n.Spec.ProviderID] = true
		resp, err := ca.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: n.Name, ProviderID: n.Spec.ProviderID, Labels: n.Labels}})
		require.NoError(t, err)
		if resp.GetNodeGroup().GetId() == id {
			registered++
		}
	}
	instances, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
	require.NoError(t, err)
	for _, i := range instances.Instances {
		if providerIDs[i.Id] || i.GetStatus().GetInstanceState() == protos.InstanceStatus_instanceDeleting || i.GetStatus().GetErrorInfo() != nil {
			continue
		}
		fake := &protos.ExternalGrpcNode{Name: i.Id, ProviderID: i.Id}
		resp, err := ca.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: fake})
		require.NoError(t, err)
		if resp.GetNodeGroup().GetId() == id {
			unregistered = append(unregistered, fake)
		}
	}
	return registered, unregistered
}

// TestAutoscalerSetShortOfNodesAtMinSize: a set at minReplicas whose
// class's limits hold one of its replicas back. cluster-autoscaler's
// fixNodeGroupSize finds a group with fewer registered nodes than its
// target size less its unregistered instances, and after
// --max-node-provision-time lowers the target to the registered nodes with
// DecreaseTargetSize, which the API server refuses below minReplicas. An
// error there aborts cluster-autoscaler's whole loop (every group, every
// loop), and a size that stays incorrect skips the rest of every loop: it
// must find the size correct. Long unregistered, the replica without a
// Node is removed by DeleteNodes within the min size, which deletes no
// Node.
func TestAutoscalerSetShortOfNodesAtMinSize(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-short")
	createClass(t, "ca-short", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](3)}
	})
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "ca-short", Replicas: ptr.To[int32](3),
			Autoscaling: &nodesetv1alpha1.Autoscaling{MinReplicas: 3, MaxReplicas: 5}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	id := ns + "/pool"
	eventually(t, 2*time.Minute, "three nodes", converged(c, t, ns, "pool", 3))
	// The admin lowers the class's limit, and one of the nodes goes (its
	// machine failed, or someone deleted it): the set may not replace it.
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "ca-short", metav1.GetOptions{})
	require.NoError(t, err)
	class.Spec.Limits.MaxNodes = ptr.To[int32](2)
	_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
	require.NoError(t, err)
	kube, _ := clients(t)
	nodes, err := setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().Nodes().Delete(ctx, nodes[0].Name, metav1.DeleteOptions{}))
	var names []string
	eventually(t, 2*time.Minute, "two Ready nodes, the third held back by the class's limit", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "pool")
		if err != nil {
			return false, err.Error()
		}
		names = names[:0]
		for i := range nodes {
			if nodes[i].Spec.ProviderID == "" || !nodeutil.IsReady(&nodes[i]) {
				return false, nodes[i].Name + " not Ready"
			}
			names = append(names, nodes[i].Name)
		}
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if len(nodes) != 2 || accepted == nil || accepted.Reason != nodesetv1alpha1.ReasonLimitExceeded {
			return false, fmt.Sprintf("%d nodes, Accepted %v", len(nodes), accepted)
		}
		return true, ""
	})
	ca := autoscalerClient(t, c)

	caFixGroupSize(ctx, t, ca, id)

	// removeOldUnregisteredNodes: nothing below the min size; above it,
	// DeleteNodes of the long unregistered instances.
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
	require.NoError(t, err)
	set.Spec.Autoscaling.MinReplicas = 1
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "min size 1", func(ctx context.Context) (bool, string) {
		groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, g := range groups.NodeGroups {
			if g.Id == id && g.MinSize == 1 {
				return true, ""
			}
		}
		return false, "not yet"
	})
	_, unregistered := caGroupSize(ctx, t, ca, id)
	require.Len(t, unregistered, 1)
	_, err = ca.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: id, Nodes: unregistered})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "two nodes, within the limit", func(ctx context.Context) (bool, string) {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if !meta.IsStatusConditionTrue(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted) || set.Status.ObservedGeneration != set.Generation {
			return false, fmt.Sprintf("replicas %d, conditions %v", *set.Spec.Replicas, set.Status.Conditions)
		}
		return *set.Spec.Replicas == 2, fmt.Sprintf("replicas %d", *set.Spec.Replicas)
	})
	nodes, err = setNodes(ctx, t, ns, "pool")
	require.NoError(t, err)
	var still []string
	for _, n := range nodes {
		if n.DeletionTimestamp == nil {
			still = append(still, n.Name)
		}
	}
	assert.ElementsMatch(t, names, still, "no Node deleted")
	registered, unregistered := caGroupSize(ctx, t, ca, id)
	assert.Equal(t, 2, registered)
	assert.Empty(t, unregistered)
}

// TestAutoscalerSetShortOfMoreThanItsListedInstances: a tenant's set whose
// minReplicas is more than a thousand above the Nodes it can have (here its
// namespace's share of the class is one Node; a class its namespace may not
// use does the same; so does a limit the admin lowers under a set at its
// minReplicas). NodeGroupNodes lists at most a thousand pending
// instances, so cluster-autoscaler would see fewer registered nodes than
// the target size less the unregistered ones, and after
// --max-node-provision-time call DecreaseTargetSize down to what it sees,
// below minReplicas: refused, and the refusal aborts its whole loop, every
// loop, for every tenant. The target size it is told is what it can see:
// the size is correct, nothing is lowered, and scaling the set stays
// refused.
func TestAutoscalerSetShortOfMoreThanItsListedInstances(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-huge")
	createClass(t, "ca-huge", func(class *nodesetv1alpha1.NodeClass) {
		twoCPUs(class)
		class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](1)}
	})
	withoutWebhook(t) // which refuses such a set when it is up
	const wanted = 1002
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "ca-huge", Replicas: ptr.To[int32](wanted),
			Autoscaling: &nodesetv1alpha1.Autoscaling{MinReplicas: wanted, MaxReplicas: wanted}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	id := ns + "/huge"
	eventually(t, 2*time.Minute, "one Ready node, the rest held back by the class's limit", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "huge")
		if err != nil {
			return false, err.Error()
		}
		if len(nodes) != 1 || nodes[0].Spec.ProviderID == "" || !nodeutil.IsReady(&nodes[0]) {
			return false, fmt.Sprintf("%d nodes", len(nodes))
		}
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "huge", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if accepted == nil || accepted.Reason != nodesetv1alpha1.ReasonLimitExceeded {
			return false, fmt.Sprintf("Accepted %v", accepted)
		}
		return true, ""
	})
	ca := autoscalerClient(t, c)

	caFixGroupSize(ctx, t, ca, id)
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "huge", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(wanted), *set.Spec.Replicas, "the tenant's replicas are its own")
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 1})
	assert.Error(t, err, "no room, and past maxReplicas")
}

// caFixGroupSize runs two loops of cluster-autoscaler's fixNodeGroupSize on
// group id: a group whose registered nodes are fewer than its target size
// less its unregistered instances has its target lowered to them, and a
// refusal aborts cluster-autoscaler's loop. After one such lowering the
// size must be correct.
func caFixGroupSize(ctx context.Context, t *testing.T, ca protos.CloudProviderClient, id string) {
	t.Helper()
	for loop := 1; loop <= 2; loop++ {
		target, err := ca.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: id})
		require.NoError(t, err)
		registered, unregistered := caGroupSize(ctx, t, ca, id)
		if registered >= int(target.TargetSize)-len(unregistered) {
			continue
		}
		delta := int32(registered) - target.TargetSize
		_, err = ca.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: id, Delta: delta})
		require.NoError(t, err, "loop %d: incorrect size (registered %d, target %d, unregistered %d): DecreaseTargetSize(%d) failing aborts cluster-autoscaler's loop",
			loop, registered, target.TargetSize, len(unregistered), delta)
		require.Equal(t, 1, loop, "the size is still incorrect after DecreaseTargetSize: cluster-autoscaler skips the rest of every loop")
	}
}
