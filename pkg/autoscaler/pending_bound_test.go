package autoscaler

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
