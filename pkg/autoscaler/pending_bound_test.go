package autoscaler

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestPendingInstancesAreBounded: spec.replicas is the tenant's, up to
// 2^31-1, and a set that is not Accepted still has autoscaling. The
// instances of its replicas without a Node must not make NodeGroupNodes
// build an answer as large as the tenant likes (the nodeset-controller's
// memory, and gRPC's 4 MiB default for what a client receives): the list
// is bounded whatever replicas says.
func TestPendingInstancesAreBounded(t *testing.T) {
	set := testSet(200000)
	set.Spec.Autoscaling.MaxReplicas = math.MaxInt32
	set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: nodesetv1alpha1.ReasonLimitExceeded}}
	f := newFixture(t, nil, set)
	ctx := context.Background()

	resp, err := f.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: "team-a/web"})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(resp.Instances), maxPendingInstances)
	assert.Less(t, proto.Size(resp), 4<<20, "cluster-autoscaler could not receive the answer")

	// The last one listed is still the set's; one past it is none.
	last := pendingID(set, int32(len(resp.Instances)))
	got, err := f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: last, ProviderID: last}})
	require.NoError(t, err)
	assert.Equal(t, "team-a/web", got.NodeGroup.Id)
	past := pendingID(set, int32(len(resp.Instances))+1)
	got, err = f.server.NodeGroupForNode(ctx, &protos.NodeGroupForNodeRequest{Node: &protos.ExternalGrpcNode{Name: past, ProviderID: past}})
	require.NoError(t, err)
	assert.Empty(t, got.NodeGroup.Id, "an instance never listed is no group's")
}

// TestADrainingNodeIsNoPendingReplica: a Node being deleted that spec.replicas
// still counts (deleted by hand, replaced, interrupted; not one of
// cluster-autoscaler's DeleteNodes) is still a registered Node of the group
// to cluster-autoscaler: it maps to the group by NodeGroupForNode until it is
// gone, so Registered already equals the target size
// (clusterstate.go updateIncorrectNodeGroupSizes). Its replacement, which a
// RollingUpdate set makes only once the surge allows (maxSurge 0 here, or
// several Nodes draining at once), is no unregistered instance yet. Listed
// as a nodeset-pending:// instance, it would be counted twice, and once that
// fake node is older than --max-node-provision-time (a drain held by a
// PodDisruptionBudget), cluster-autoscaler's removeOldUnregisteredNodes
// deletes it, and the set loses a replica nobody asked to remove.
func TestADrainingNodeIsNoPendingReplica(t *testing.T) {
	set := testSet(3)
	set.Spec.Strategy.RollingUpdate = &nodesetv1alpha1.RollingUpdateNodeSet{
		MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	draining := setNode(set, "web-c", "simulated:///web-c", true)
	draining.DeletionTimestamp = ptr.To(metav1.Now())
	f := newFixture(t, nil, set, setNode(set, "web-a", "simulated:///web-a", true),
		setNode(set, "web-b", "simulated:///web-b", true), draining)
	ctx := context.Background()

	resp, err := f.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: "team-a/web"})
	require.NoError(t, err)
	var ids []string
	for _, i := range resp.Instances {
		ids = append(ids, i.Id)
	}
	assert.Equal(t, []string{"simulated:///web-a", "simulated:///web-b", "simulated:///web-c"}, ids,
		"three registered Nodes for a target size of 3: no unregistered instance besides them")

	// cluster-autoscaler's removal of the long-unregistered fake node it
	// was given (or still has in its cached instance list).
	pendingFake := pendingID(set, 1)
	_, err = f.server.NodeGroupDeleteNodes(ctx, &protos.NodeGroupDeleteNodesRequest{Id: "team-a/web",
		Nodes: []*protos.ExternalGrpcNode{{Name: pendingFake, ProviderID: pendingFake}}})
	require.NoError(t, err)
	assert.Equal(t, int32(3), *f.set(t).Spec.Replicas, "the draining Node's replacement is no replica to give up")
}

// TestTargetSizeIsWhatClusterAutoscalerCanSeeBelowMinReplicas: a set short
// of more Nodes than the pending instances NodeGroupNodes lists is of an
// incorrect size to cluster-autoscaler (registered nodes fewer than the
// target size less the unregistered instances), which it fixes with
// DecreaseTargetSize down to the registered nodes whatever the min size.
// Below minReplicas that is refused, and the refusal aborts its whole
// loop; so there the target size it is told is the one it can see. At or
// above minReplicas it is spec.replicas, and the fix lowers it as before.
func TestTargetSizeIsWhatClusterAutoscalerCanSeeBelowMinReplicas(t *testing.T) {
	tests := []struct {
		name             string
		replicas, min    int32
		nodes            int
		target, afterFix int32 // afterFix: spec.replicas after cluster-autoscaler's fix, if any
	}{
		{name: "short of fewer than are listed", replicas: 900, min: 900, nodes: 1, target: 900, afterFix: 900},
		{name: "short of more than are listed, below minReplicas", replicas: 1500, min: 1500, nodes: 2, target: 1002, afterFix: 1500},
		{name: "short of more than are listed, no Node, minReplicas 1", replicas: 1500, min: 1, nodes: 0, target: 1000, afterFix: 1500},
		{name: "short of more than are listed, at minReplicas", replicas: 1500, min: 2, nodes: 2, target: 1500, afterFix: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := testSet(tt.replicas)
			set.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: tt.min, MaxReplicas: tt.replicas}
			set.Status.Conditions = []metav1.Condition{{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse, Reason: nodesetv1alpha1.ReasonLimitExceeded}}
			var nodes []*corev1.Node
			for i := range tt.nodes {
				name := fmt.Sprintf("web-%d", i)
				nodes = append(nodes, setNode(set, name, "simulated:///"+name, true))
			}
			f := newFixture(t, nil, set, nodes...)
			ctx := context.Background()
			target, err := f.server.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: "team-a/web"})
			require.NoError(t, err)
			assert.Equal(t, tt.target, target.TargetSize)
			instances, err := f.server.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: "team-a/web"})
			require.NoError(t, err)
			registered, unregistered := tt.nodes, len(instances.Instances)-tt.nodes
			if registered < int(target.TargetSize)-unregistered {
				// cluster-autoscaler's fixNodeGroupSize
				_, err := f.server.NodeGroupDecreaseTargetSize(ctx, &protos.NodeGroupDecreaseTargetSizeRequest{Id: "team-a/web",
					Delta: int32(registered) - target.TargetSize})
				require.NoError(t, err, "an error here aborts cluster-autoscaler's loop")
			}
			assert.Equal(t, tt.afterFix, *f.set(t).Spec.Replicas)
		})
	}
}
