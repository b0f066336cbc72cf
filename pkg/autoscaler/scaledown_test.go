package autoscaler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/pkg/plan"
)

// caSize is what cluster-autoscaler's clusterstate counts of a group:
// registered, the Nodes NodeGroupForNode puts in it; unregistered, the
// instances of NodeGroupNodes no Node carries as provider ID, expected to
// register (not deleting, no error) and whose fake node (name and provider
// ID the instance id) NodeGroupForNode puts in it. The fake nodes are
// returned for DeleteNodes.
func caSize(t *testing.T, s *Server, id string, nodes []*corev1.Node) (registered int, unregistered []*protos.ExternalGrpcNode) {
	t.Helper()
	ctx := context.Background()
	providerIDs := map[string]bool{}
	for _, n := range nodes {
		providerIDs[n.Spec.ProviderID] = true
		resp, err := s.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: n.Name, ProviderID: n.Spec.ProviderID, Labels: n.Labels}})
		require.NoError(t, err)
		if resp.NodeGroup.Id == id {
			registered++
		}
	}
	instances, err := s.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: id})
	require.NoError(t, err)
	for _, i := range instances.Instances {
		if providerIDs[i.Id] || i.Status.InstanceState == protos.InstanceStatus_instanceDeleting || i.Status.ErrorInfo != nil {
			continue
		}
		fake := &protos.ExternalGrpcNode{Name: i.Id, ProviderID: i.Id}
		resp, err := s.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: fake})
		require.NoError(t, err)
		if resp.NodeGroup.Id == id {
			unregistered = append(unregistered, fake)
		}
	}
	return registered, unregistered
}

// TestSetShortOfNodesIsNoIncorrectSize: a set whose class's limits (or a
// missing verdict, or its cloud group) hold some of its replicas back has
// fewer Nodes than its target size. cluster-autoscaler calls a group with
// fewer registered nodes than target size less unregistered instances of
// an incorrect size, and after --max-node-provision-time lowers the target
// with DecreaseTargetSize; an error there aborts its whole loop, every
// loop, and a success that changes nothing skips the rest of each loop.
// At minReplicas the target cannot go lower, so the nodes the set has not
// made are instances of NodeGroupNodes, unregistered in its count: the
// size is correct, and once they are long unregistered cluster-autoscaler
// removes them with DeleteNodes, within the min size, which lowers the
// target and deletes no Node.
func TestSetShortOfNodesIsNoIncorrectSize(t *testing.T) {
	set := testSet(3)
	set.Spec.Autoscaling.MinReplicas = 3
	set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: nodesetv1alpha1.ReasonLimitExceeded}}
	nodes := []*corev1.Node{setNode(set, "web-a", "simulated:///web-a", true), setNode(set, "web-b", "simulated:///web-b", true)}
	f := newFixture(t, nil, set, nodes...)
	ctx := context.Background()

	registered, unregistered := caSize(t, f.server, "team-a/web", nodes)
	assert.GreaterOrEqual(t, registered, 3-len(unregistered), "cluster-autoscaler would find the group of an incorrect size (registered %d, target 3, unregistered %d) and lower the target below minReplicas 3",
		registered, len(unregistered))
	require.Len(t, unregistered, 1)

	// At min size cluster-autoscaler leaves long-unregistered instances;
	// a deletion below it is refused, and so is a target below it.
	_, err := f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: unregistered})
	assert.Equal(t, codes.FailedPrecondition, code(err), "%v", err)
	_, err = f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: -1})
	assert.Equal(t, codes.FailedPrecondition, code(err), "below minReplicas: %v", err)
	assert.Contains(t, err.Error(), "minReplicas")
	assert.Zero(t, f.writes())

	// Above it, the instance is removed: one replica less, no Node named.
	set = f.set(t)
	set.Spec.Autoscaling.MinReplicas = 1
	_, err = f.nodesets.NodesetV1alpha1().NodeSets("team-a").Update(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.sets.Update(set))
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: unregistered})
	require.NoError(t, err)
	got := f.set(t)
	assert.Equal(t, int32(2), *got.Spec.Replicas)
	assert.Empty(t, got.Annotations[nodesetv1alpha1.AnnotationDeleteNodes], "no Node is named")

	// Its id is stale now: no group, and not deleted again.
	require.NoError(t, f.sets.Update(got))
	registered, unregistered = caSize(t, f.server, "team-a/web", nodes)
	assert.Equal(t, 2, registered)
	assert.Empty(t, unregistered)
	resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "nodeset-pending://team-a/web/1", ProviderID: "nodeset-pending://team-a/web/1"}})
	require.NoError(t, err)
	assert.Empty(t, resp.NodeGroup.Id)
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: "nodeset-pending://team-a/web/1", ProviderID: "nodeset-pending://team-a/web/1"}}})
	require.NoError(t, err, "a stale instance is nothing to delete")
	assert.Equal(t, int32(2), *f.set(t).Spec.Replicas, "a stale instance takes no registered node")

	// Another group's instance is not this group's to delete.
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{
		{Name: "nodeset-pending://team-b/web/1", ProviderID: "nodeset-pending://team-b/web/1"}}})
	assert.Equal(t, codes.InvalidArgument, code(err), "%v", err)
}

// TestDeletingANodeBeingReplacedLowersTheTarget: a Node deleted by someone
// else (by hand, replaced by the node controller, interrupted) is still
// counted by spec.replicas, and the NodeSetController makes its
// replacement. nodeset's drain only cordons it, and cluster-autoscaler's
// scale-down skips a node as being deleted only by its own ToBeDeleted
// taint (actuation.IsNodeBeingDeleted), so an emptied draining Node is a
// fine scale-down candidate. cluster-autoscaler's DeleteNodes means "this
// node goes, and the group is one smaller" (externalgrpc_node_group.go
// DeleteNodes; it checked size-1 >= min size): answered with success and
// no decrement, the replacement is made, and the node cluster-autoscaler
// removed comes back until it scales the group down again. The second call
// for the same node (a retry) must not take a second one.
func TestDeletingANodeBeingReplacedLowersTheTarget(t *testing.T) {
	set := testSet(3)
	draining := setNode(set, "web-c", "simulated:///web-c", true)
	draining.DeletionTimestamp = ptr.To(metav1.Now())
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true),
		setNode(set, "web-b", "simulated:///web-b", true), draining)
	ctx := context.Background()

	req := &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: "web-c", ProviderID: "simulated:///web-c"}}}
	_, err := f.server.NodeGroupDeleteNodes(ctx, req)
	require.NoError(t, err)
	got := f.set(t)
	assert.Equal(t, int32(2), *got.Spec.Replicas, "the group is one smaller: no replacement for web-c")
	assert.True(t, plan.DeleteList(got)["web-c"], "written down, so that a retry takes no second replica")

	require.NoError(t, f.sets.Update(got)) // the cache catches up
	_, err = f.server.NodeGroupDeleteNodes(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, int32(2), *f.set(t).Spec.Replicas, "a retry takes nothing more")
}

// TestDeletingASurplusNodeTakesNoReplica: a Node being deleted because
// spec.replicas went down (more Nodes than replicas stay) is no replica:
// named by cluster-autoscaler, it takes nothing more.
func TestDeletingASurplusNodeTakesNoReplica(t *testing.T) {
	set := testSet(2)
	surplus := setNode(set, "web-c", "simulated:///web-c", true)
	surplus.DeletionTimestamp = ptr.To(metav1.Now())
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true),
		setNode(set, "web-b", "simulated:///web-b", true), surplus)
	_, err := f.server.NodeGroupDeleteNodes(context.Background(), &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: "web-c", ProviderID: "simulated:///web-c"}}})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *f.set(t).Spec.Replicas)
	assert.Zero(t, f.writes())
}

// TestAFailedMachineGoesDuringARollout: cluster-autoscaler deletes every
// instance NodeGroupNodes reports with a create error, in every loop
// (static_autoscaler.go deleteCreatedNodesWithErrors, no min-size or other
// check of its own), and an unregistered one past --max-node-provision-time
// (removeOldUnregisteredNodes). Such a Node has no machine: deleting it
// drains nothing and takes nothing the rollout counts as available. Refused
// because the set is rolling out, the Node stays, its replica stays in the
// target size, and each scale-up cluster-autoscaler retries after its
// backoff (the pods are still pending) raises the target again for
// machines that are never given up.
func TestAFailedMachineGoesDuringARollout(t *testing.T) {
	set := testSet(3)
	set.Status.TemplateHash = "h2" // web-a and web-b are of h1: rolling out
	failed := setNode(set, "web-c", "", false)
	failed.Labels[nodesetv1alpha1.LabelTemplateHash] = "h2"
	failed.Annotations = map[string]string{nodesetv1alpha1.AnnotationProvisioningError: "OutOfCapacity: no sim.small"}
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true),
		setNode(set, "web-b", "simulated:///web-b", true), failed)
	ctx := context.Background()

	fake := unregisteredPrefix + "web-c" // cluster-autoscaler's fake node of the failed instance
	_, err := f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: fake, ProviderID: fake}}})
	require.NoError(t, err)
	got := f.set(t)
	assert.Equal(t, int32(2), *got.Spec.Replicas)
	assert.True(t, plan.DeleteList(got)["web-c"], "the failed Node is the one that goes")

	// A Node with a machine is still not drained mid-rollout.
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: "web-a", ProviderID: "simulated:///web-a"}}})
	assert.Equal(t, "FailedPrecondition", code(err).String())
}
