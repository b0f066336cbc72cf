package autoscaler

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// caScaleUp is cluster-autoscaler 1.36's scale-up of one group for pods
// that need more nodes (core/scaleup/orchestrator): a group at its
// NodeGroups max size is skipped, and the new size is capped at it; then
// one IncreaseSize. A refused IncreaseSize is a failed scale-up: the group
// is backed off (5 minutes at first) and adds nothing.
func caScaleUp(t *testing.T, s *Server, id string, needed int32) (int32, error) {
	t.Helper()
	ctx := context.Background()
	groups, err := s.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	var group *protos.NodeGroup
	for _, g := range groups.NodeGroups {
		if g.Id == id {
			group = g
		}
	}
	require.NotNil(t, group, "node group %s listed", id)
	target, err := s.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: id})
	require.NoError(t, err)
	if target.TargetSize >= group.MaxSize {
		return 0, nil // "max size reached": the pods go to another group
	}
	increase := min(target.TargetSize+needed, group.MaxSize) - target.TargetSize
	_, err = s.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: increase})
	return increase, err
}

// TestNodeGroupsMaxSizeHoldsClassLimits: cluster-autoscaler cannot see a
// NodeClass's limits. Told only maxReplicas, it asks for more than the
// class allows, is refused as a whole and backs the group off, so the
// nodes the limits still allow are not added either, and pods wait. The
// max size it is given is what the set may grow to.
func TestNodeGroupsMaxSizeHoldsClassLimits(t *testing.T) {
	other := testSet(5)
	other.Name = "other"
	var nodes []*corev1.Node
	for _, name := range []string{"o1", "o2", "o3", "o4", "o5"} {
		nodes = append(nodes, setNode(other, name, "simulated:///"+name, true))
	}
	tests := []struct {
		name     string
		replicas int32
		needed   int32
		added    int32 // what cluster-autoscaler adds
		maxSize  int32
	}{
		// maxNodes 8, 5 nodes of another set: the set may have 3.
		{name: "more needed than the limits allow", replicas: 1, needed: 4, added: 2, maxSize: 3},
		{name: "within the limits", replicas: 1, needed: 1, added: 1, maxSize: 3},
		{name: "at the limits", replicas: 3, needed: 2, added: 0, maxSize: 3},
		{name: "over the limits (lowered since)", replicas: 4, needed: 1, added: 0, maxSize: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := testSet(tt.replicas)
			set.Spec.Autoscaling.MaxReplicas = 6
			f := newFixture(t, nil, set, nodes...)
			added, err := caScaleUp(t, f.server, "team-a/web", tt.needed)
			require.NoError(t, err, "cluster-autoscaler's scale-up is refused and the group backed off")
			assert.Equal(t, tt.added, added)
			assert.Equal(t, tt.replicas+tt.added, *f.set(t).Spec.Replicas)
			groups, err := f.server.NodeGroups(context.Background(), &protos.NodeGroupsRequest{})
			require.NoError(t, err)
			assert.Equal(t, tt.maxSize, groups.NodeGroups[0].MaxSize)
			assert.Equal(t, int32(1), groups.NodeGroups[0].MinSize)
		})
	}

	t.Run("no limits", func(t *testing.T) {
		class := testClass()
		class.Spec.Limits = nil
		f := newClassFixture(t, class, nil, testSet(1), nodes...)
		added, err := caScaleUp(t, f.server, "team-a/web", 9)
		require.NoError(t, err)
		assert.Equal(t, int32(5), added, "up to maxReplicas")
	})
}

// TestTemplateNodeHasRoomForPods: cluster-autoscaler decides whether
// pending pods fit a new node by running the scheduler's filters on the
// template node, and NodeResourcesFit admits no pod to a node whose
// allocatable has no "pods". A kubelet always reports it (110 unless
// --max-pods says otherwise), so a driver that reports only cpu and memory
// must not make every pod "not fit" a new node of the set, which leaves a
// set at zero never scaled up.
func TestTemplateNodeHasRoomForPods(t *testing.T) {
	tests := []struct {
		name     string
		capacity *nodesetv1alpha1.NodeCapacity
		pods     string
	}{
		{name: "driver reports cpu and memory only", pods: "110", capacity: &nodesetv1alpha1.NodeCapacity{
			Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}}},
		{name: "driver reports pods", pods: "29", capacity: &nodesetv1alpha1.NodeCapacity{
			Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("29")}}},
		{name: "driver reports allocatable pods", pods: "17", capacity: &nodesetv1alpha1.NodeCapacity{
			Resources:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("29")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3800m"), corev1.ResourcePods: resource.MustParse("17")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := testClass()
			class.Status.Capacity = tt.capacity
			f := newClassFixture(t, class, nil, testSet(0))
			resp, err := f.server.NodeGroupTemplateNodeInfo(context.Background(), &protos.NodeGroupTemplateNodeInfoRequest{Id: "team-a/web"})
			require.NoError(t, err)
			node := &corev1.Node{}
			require.NoError(t, node.Unmarshal(resp.NodeBytes))
			assert.Equal(t, tt.pods, ptr.To(node.Status.Allocatable[corev1.ResourcePods]).String(), "allocatable pods")
			assert.GreaterOrEqual(t, node.Status.Capacity.Pods().Value(), node.Status.Allocatable.Pods().Value(), "capacity pods")
		})
	}
}
