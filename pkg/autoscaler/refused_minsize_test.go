package autoscaler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestARefusedGroupsMinSizeIsItsTargetSize: a set nodeset adds and removes
// no node of (not Accepted) is a group of the Nodes it has, and its min
// size, in NodeGroups and NodeGroupForNode alike, is that target size,
// whatever its minReplicas and spec.replicas say. cluster-autoscaler asks
// to raise a group below its min size (--enforce-node-group-min-size), and
// gives up on long-unregistered instances of a group above it: both would
// be refused, and each refusal ends that part of its loop for the groups
// after this one.
func TestARefusedGroupsMinSizeIsItsTargetSize(t *testing.T) {
	for _, tc := range []struct {
		name          string
		replicas, min int32
		// nodes are the set's Nodes: name and provider ID ("" for one
		// whose machine was never made).
		nodes [][2]string
	}{
		{name: "replicas raised past its Nodes", replicas: 50, min: 1, nodes: [][2]string{{"web-a", "simulated:///web-a"}}},
		{name: "minReplicas above its Nodes", replicas: 3, min: 3, nodes: [][2]string{{"web-a", "simulated:///web-a"}}},
		{name: "minReplicas below its Nodes, one never registered", replicas: 2, min: 0,
			nodes: [][2]string{{"web-a", "simulated:///web-a"}, {"web-b", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := testSet(tc.replicas)
			set.Spec.Autoscaling.MinReplicas = tc.min
			set.Spec.Autoscaling.MaxReplicas = 60
			set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse,
				Reason: nodesetv1alpha1.ReasonNamespaceNotAllowed, Message: `namespace "team-a" may not use NodeClass "sim"`}}
			var nodes []*corev1.Node
			for _, n := range tc.nodes {
				nodes = append(nodes, setNode(set, n[0], n[1], n[1] != ""))
			}
			f := newFixture(t, nil, set, nodes...)
			ctx := context.Background()

			size, err := f.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "team-a/web"})
			require.NoError(t, err)
			require.EqualValues(t, len(nodes), size.TargetSize, "the Nodes it has")

			groups, err := f.server.NodeGroups(ctx, &protos.NodeGroupsRequest{})
			require.NoError(t, err)
			require.Len(t, groups.NodeGroups, 1)
			assert.Equal(t, size.TargetSize, groups.NodeGroups[0].MinSize, "NodeGroups: %s", groups.NodeGroups[0].Debug)

			for _, node := range nodes {
				// As cluster-autoscaler sends it: a registered Node with
				// its labels, an unregistered instance as a fake node.
				want := &protos.ExternalGrpcNode{Name: node.Name, ProviderID: node.Spec.ProviderID, Labels: node.Labels}
				if node.Spec.ProviderID == "" {
					want = &protos.ExternalGrpcNode{Name: InstanceID(node), ProviderID: InstanceID(node)}
				}
				group, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: want})
				require.NoError(t, err)
				require.Equal(t, "team-a/web", group.NodeGroup.Id, "%s", want.Name)
				assert.Equal(t, size.TargetSize, group.NodeGroup.MinSize, "NodeGroupForNode(%s): %s", want.Name, group.NodeGroup.Debug)
			}

			// What a min size below or above would have asked for is refused.
			_, err = f.server.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: "team-a/web", Delta: 1})
			assert.ErrorContains(t, err, "not Accepted (NamespaceNotAllowed")
			_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
				Nodes: []*protos.ExternalGrpcNode{{Name: InstanceID(nodes[len(nodes)-1]), ProviderID: InstanceID(nodes[len(nodes)-1])}}})
			assert.ErrorContains(t, err, "not Accepted (NamespaceNotAllowed")
			assert.Zero(t, f.writes())
			assert.Equal(t, ptr.To(tc.replicas), f.set(t).Spec.Replicas)
		})
	}
}
