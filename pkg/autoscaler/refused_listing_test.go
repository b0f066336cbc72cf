package autoscaler

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestRefusedSetsAreGroupsOnlyWhileTheyHaveNodes: a set nodeset makes no
// Nodes for stays a node group while it has Nodes (cluster-autoscaler
// must hold them: min size, refused scale-up), and is none without: a
// tenant's flood of refused sets costs cluster-autoscaler's loop nothing.
// A Node a kubelet labelled into a refused set is none of its Nodes.
func TestRefusedSetsAreGroupsOnlyWhileTheyHaveNodes(t *testing.T) {
	refused := metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: nodesetv1alpha1.ReasonNamespaceNotAllowed,
		Message: `namespace "team-a" may not use NodeClass "sim": it is not in spec.allowedNamespaces.namespaces`}
	named := func(name string, condition metav1.Condition) *nodesetv1alpha1.NodeSet {
		set := testSet(1)
		set.Name = name
		set.Status.Conditions = []metav1.Condition{condition}
		return set
	}
	kept := named("web", refused)
	kept.Spec.Replicas = ptr.To[int32](50) // raised by its tenant while the webhook was away
	strayed := named("strayed", refused)
	stranger := setNode(strayed, "stranger", "simulated:///stranger", true)
	stranger.Finalizers = nil // registered by its kubelet with the set's labels: no replica
	f := newFixture(t, nil, kept, setNode(kept, "web-a", "simulated:///web-a", true), stranger)
	others := []*nodesetv1alpha1.NodeSet{strayed,
		named("fresh", metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}),
		named("full", metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: nodesetv1alpha1.ReasonLimitExceeded})}
	for i := range 200 {
		others = append(others, named(fmt.Sprintf("flood-%03d", i), refused))
	}
	for _, set := range others {
		require.NoError(t, f.sets.Add(set))
	}

	groups, err := f.server.NodeGroups(context.Background(), &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	var ids []string
	for _, g := range groups.NodeGroups {
		ids = append(ids, g.Id)
	}
	assert.ElementsMatch(t, []string{"team-a/web", "team-a/fresh", "team-a/full"}, ids,
		"a refused set with Nodes, and every set nodeset manages; no refused set without Nodes")

	// The one listed keeps its node held, and its scale-up refused.
	held, err := f.server.NodeGroupForNode(context.Background(), &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
		Name: "web-a", ProviderID: "simulated:///web-a", Labels: setNode(kept, "web-a", "", true).Labels}})
	require.NoError(t, err)
	assert.Equal(t, "team-a/web", held.NodeGroup.Id)
	assert.GreaterOrEqual(t, held.NodeGroup.MinSize, int32(1), "its node is held: min size reached")
	_, err = f.server.NodeGroupIncreaseSize(context.Background(), &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
	assert.ErrorContains(t, err, "not Accepted (NamespaceNotAllowed")

	// No machine is coming for its 49 replicas without a Node: none is an
	// upcoming node to cluster-autoscaler, whose copies of the set's Node
	// would take other tenants' pending pods in its simulation.
	size, err := f.server.NodeGroupTargetSize(context.Background(), &protos.NodeGroupTargetSizeRequest{Id: "team-a/web"})
	require.NoError(t, err)
	assert.EqualValues(t, 1, size.TargetSize, "the Nodes it has")
	instances, err := f.server.NodeGroupNodes(context.Background(), &protos.NodeGroupNodesRequest{Id: "team-a/web"})
	require.NoError(t, err)
	require.Len(t, instances.Instances, 1, "its Node, and no pending instance")
	assert.Equal(t, "simulated:///web-a", instances.Instances[0].Id)
	owner, err := f.server.NodeGroupForNode(context.Background(), &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{
		Name: pendingID(kept, 1), ProviderID: pendingID(kept, 1)}})
	require.NoError(t, err)
	assert.Empty(t, owner.NodeGroup.Id, "an id it listed before it was refused is no instance of it now")
}
