package autoscaler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// acceptedSet is a NodeSet "name" of the test class that the
// NodeSetController has accepted, with replicas and no Nodes yet.
func acceptedSet(name string, replicas int32) *nodesetv1alpha1.NodeSet {
	set := testSet(replicas)
	set.Name = name
	set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"}}
	return set
}

// TestIncreaseSizeAddsWhatTheClassAllows: cluster-autoscaler caps a
// scale-up at the max size NodeGroups gave, which its balancing gives to
// every similar group alike, while NodeSets sharing a class share its
// room. A request past what is left adds the nodes that fit: refused, it
// would add none and back the group off (cluster-autoscaler's executor
// registers a failed scale-up for any IncreaseSize error).
func TestIncreaseSizeAddsWhatTheClassAllows(t *testing.T) {
	set := testSet(2)
	set.Spec.Autoscaling.MaxReplicas = 20
	other := testSet(5)
	other.Name = "other"
	var nodes []*corev1.Node
	for _, name := range []string{"o1", "o2", "o3", "o4", "o5"} {
		nodes = append(nodes, setNode(other, name, "simulated:///"+name, true))
	}
	f := newFixture(t, nil, set, nodes...)
	// maxNodes 8, 5 nodes of another set: this one may have 3.
	_, err := f.server.NodeGroupIncreaseSize(context.Background(), &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 4})
	require.NoError(t, err, "the nodes that fit are added")
	assert.Equal(t, int32(3), *f.set(t).Spec.Replicas)

	// Nothing fits any more: refused, and nothing written.
	writes := f.writes()
	_, err = f.server.NodeGroupIncreaseSize(context.Background(), &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
	assert.Equal(t, codes.ResourceExhausted, code(err), "%v", err)
	assert.Equal(t, writes, f.writes())
}

// TestIncreaseSizeCountsOtherSetsGrowth: cluster-autoscaler grows similar
// groups one right after the other (or at once, --parallel-scale-up). The
// first set's nodes do not exist yet when the second asks: counted only
// by machines, both would be told yes, and the controller would make the
// nodes of whichever syncs first while cluster-autoscaler waited for the
// others until its max node provision time. The sets of the class that
// the controller manages count with the nodes they were told to grow to.
func TestIncreaseSizeCountsOtherSetsGrowth(t *testing.T) {
	set := acceptedSet("web", 0)
	set.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 20}
	grown := acceptedSet("grown", 6) // just scaled up, no Node made yet
	over := acceptedSet("over", 30)  // over the limits: its wish counts not
	over.Status.Conditions[0].Status, over.Status.Conditions[0].Reason = metav1.ConditionFalse, nodesetv1alpha1.ReasonLimitExceeded
	elsewhere := acceptedSet("elsewhere", 4)
	elsewhere.Spec.NodeClassName = "other-class"
	f := newFixture(t, []runtime.Object{grown, over, elsewhere}, set)

	_, err := f.server.NodeGroupIncreaseSize(context.Background(), &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 4})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *f.set(t).Spec.Replicas, "maxNodes 8 less the 6 nodes the other set is making")
}

// TestNodeGroupsMaxSizeCountsOtherSetsGrowth: the max size NodeGroups
// gives counts the other sets' growth the same way.
func TestNodeGroupsMaxSizeCountsOtherSetsGrowth(t *testing.T) {
	set := acceptedSet("web", 0)
	set.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 20}
	f := newFixture(t, nil, set)
	grown := acceptedSet("grown", 5)
	grown.Spec.Autoscaling = nil
	require.NoError(t, f.sets.Add(grown))
	groups, err := f.server.NodeGroups(context.Background(), &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	require.Len(t, groups.NodeGroups, 1)
	assert.Equal(t, int32(3), groups.NodeGroups[0].MaxSize, "%s", groups.NodeGroups[0].Debug)
}

// TestWriteTurnsAreFreed: the turns that make writes to one NodeSet (and
// scale-ups of one class) wait for each other are kept only while someone
// holds or waits for one, not for every NodeSet ever written.
func TestWriteTurnsAreFreed(t *testing.T) {
	set := testSet(2)
	set.Spec.Autoscaling.MaxReplicas = 20
	set.Spec.Autoscaling.MinReplicas = 0
	nodes := []*corev1.Node{setNode(set, "web-a", "simulated:///web-a", true)}
	class := testClass()
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](100)}
	f := newClassFixture(t, class, nil, set, nodes...)
	ctx := context.Background()
	_, err := f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
	require.NoError(t, err)
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web", Nodes: []*protos.ExternalGrpcNode{{Name: "web-a"}}})
	require.NoError(t, err)
	_, err = f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web", Delta: -1})
	require.NoError(t, err)
	assert.Zero(t, heldTurns(f.server), "no turn is held or waited for")
}

// heldTurns counts the turns the server keeps.
func heldTurns(s *Server) int { return s.writing.len() + s.growing.len() }

// TestDeletingSetIsNoGroup: a NodeSet being deleted is left out of
// NodeGroups while the controller drains its Nodes; cluster-autoscaler
// may still ask about it within the loop that listed it, or about its
// Nodes. It is no group for any call that writes or maps: told yes, a scale-up would never
// be carried out (the controller only removes a deleting set's Nodes),
// and a node mapped to a group cluster-autoscaler does not list would be
// planned for scale-down beside the controller's own drain.
func TestDeletingSetIsNoGroup(t *testing.T) {
	set := testSet(2)
	now := metav1.Now()
	set.DeletionTimestamp = &now
	set.Finalizers = []string{"nodeset.dev/nodes"}
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true))
	ctx := context.Background()
	groups, err := f.server.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	assert.Empty(t, groups.NodeGroups)
	resp, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: "web-a", ProviderID: "simulated:///web-a"}})
	require.NoError(t, err)
	assert.Empty(t, resp.NodeGroup.Id, "the node of a set being deleted belongs to no group")
	_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
	assert.Equal(t, codes.NotFound, code(err), "%v", err)
	// The reads cluster-autoscaler makes of every group its loop started
	// with are answered: an error from them aborts the whole loop.
	_, err = f.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "team-a/web"})
	assert.NoError(t, err)
	instances, err := f.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: "team-a/web"})
	require.NoError(t, err)
	assert.Len(t, instances.Instances, 1, "its Node, and no pending instance")
	// Its template is asked in that loop too: no template, and no error
	// but Unimplemented, which is the only one that aborts nothing.
	_, err = f.server.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: "team-a/web"})
	assert.Equal(t, codes.Unimplemented, code(err), "%v", err)
	assert.ErrorContains(t, err, "being deleted")
	assert.Zero(t, f.writes())
}

// TestNoTemplateOfASetNoLongerAGroupIsNoError: a set deleted, or stripped
// of spec.autoscaling, after cluster-autoscaler listed the groups of its
// loop has no template, told as Unimplemented: any other error from
// NodeGroupTemplateNodeInfo aborts that loop for every group.
func TestNoTemplateOfASetNoLongerAGroupIsNoError(t *testing.T) {
	manual := testSet(2)
	manual.Spec.Autoscaling = nil
	f := newFixture(t, nil, manual)
	ctx := context.Background()
	for id, reason := range map[string]string{"team-a/web": "has no spec.autoscaling", "team-a/gone": "no NodeSet gone"} {
		_, err := f.server.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: id})
		assert.Equal(t, codes.Unimplemented, code(err), "%s: %v", id, err)
		assert.ErrorContains(t, err, reason)
	}
	_, err := f.server.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: "team-a"})
	assert.Equal(t, codes.InvalidArgument, code(err), "an id no list holds: %v", err)
	assert.Zero(t, f.writes())
}
