package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/autoscaler/protos"
	"nodeset.dev/nodeset/test/framework"
)

// TestTenantAutoscaledSetWithinItsClass: a namespace's editor, with the
// webhook away, gives its NodeSet autoscaling bounds up to the largest
// int32 on a class that allows its namespace two Nodes, makes a burst of
// NodeSets by generateName, labels its NodeSet object as another
// namespace's, lists another namespace's Node and thousands of names in
// its delete-nodes annotation, and takes nodeset's finalizer off its live
// set. cluster-autoscaler is offered no more than the class's room, a
// scale-up past it is cut to it, the namespace never has more than two
// Nodes, and the other namespace's Node stays.
func TestTenantAutoscaledSetWithinItsClass(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	attacker, victim := createNamespace(t, "t10-auto-a"), createNamespace(t, "t10-auto-v")
	const class = "t10-auto"
	createClass(t, class, func(c *nodesetv1alpha1.NodeClass) {
		twoCPUs(c)
		c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](2)}
	})
	peak := watchPeak(t, class)
	createSet(t, victim, "v", class, 1)
	eventually(t, 2*time.Minute, "the victim's set", converged(c, t, victim, "v", 1))
	victimNodes, err := setNodes(ctx, t, victim, "v")
	require.NoError(t, err)
	withoutWebhook(t)
	_, cs := tenant(t, "tenant-a", attacker)
	sets := cs.NodesetV1alpha1().NodeSets(attacker)
	ca := autoscalerClient(t, c)
	id := attacker + "/auto"

	auto := tenantSet("auto", class, 0)
	auto.Spec.Autoscaling = &nodesetv1alpha1.Autoscaling{MinReplicas: 0, MaxReplicas: 2147483647}
	// Labels of the NodeSet object, not of its Nodes, naming the victim's set.
	auto.Labels = map[string]string{nodesetv1alpha1.LabelNodeSetNamespace: victim, nodesetv1alpha1.LabelNodeSet: "v"}
	_, err = sets.Create(ctx, auto, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "cluster-autoscaler is offered the class's room, not maxReplicas", func(ctx context.Context) (bool, string) {
		groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, g := range groups.NodeGroups {
			if g.Id == id {
				return g.MaxSize == 2 && strings.Contains(g.Debug, "Accepted=True"), fmt.Sprintf("max size %d (%s)", g.MaxSize, g.Debug)
			}
		}
		return false, "not listed"
	})
	// A scale-up past the class's room adds those that fit
	// (docs/autoscaler.md).
	_, err = ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: id, Delta: 3})
	require.NoError(t, err)
	got, err := sets.Get(ctx, "auto", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, int32(2), *got.Spec.Replicas, "the scale-up past the class's room is cut to it")
	eventually(t, 2*time.Minute, "the autoscaled set", converged(c, t, attacker, "auto", 2))

	// /scale to the largest int32, within maxReplicas: no Node more.
	require.NoError(t, framework.Scale(ctx, cs, attacker, "auto", 2147483647))
	eventually(t, time.Minute, "LimitExceeded for the largest int32", func(ctx context.Context) (bool, string) {
		got, err := sets.Get(ctx, "auto", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		return cond != nil && cond.ObservedGeneration == got.Generation && cond.Reason == "LimitExceeded" &&
			strings.Contains(cond.Message, "spec.limits.maxNodesPerNamespace"), fmt.Sprintf("%+v", cond)
	})
	require.NoError(t, framework.Scale(ctx, cs, attacker, "auto", 2))

	// A burst of sets by generateName, each asking for the room.
	for range 10 {
		_, err := sets.Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "burst-"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](2)}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	eventually(t, 2*time.Minute, "every burst set is judged", func(ctx context.Context) (bool, string) {
		list, err := sets.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, "burst-") && s.Status.ObservedGeneration != s.Generation {
				return false, s.Name + " not judged"
			}
		}
		return true, ""
	})

	// The delete list names the victim's Node among thousands of others.
	names := []string{victimNodes[0].Name}
	for i := range 5000 {
		names = append(names, fmt.Sprintf("no-such-node-%d", i))
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		nodesetv1alpha1.AnnotationDeleteNodes: strings.Join(names, ",")}}})
	require.NoError(t, err)
	_, err = sets.Patch(ctx, "auto", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "the names of no Node of the set leave the list", func(ctx context.Context) (bool, string) {
		got, err := sets.Get(ctx, "auto", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := got.Annotations[nodesetv1alpha1.AnnotationDeleteNodes]
		return left == "", fmt.Sprintf("%d characters left", len(left))
	})

	// nodeset's finalizer, taken off the live set, comes back.
	got, err = sets.Get(ctx, "auto", metav1.GetOptions{})
	require.NoError(t, err)
	got.Finalizers = slices.DeleteFunc(got.Finalizers, func(f string) bool { return f == "nodeset.dev/nodes" })
	_, err = sets.Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, time.Minute, "nodeset's finalizer is back", func(ctx context.Context) (bool, string) {
		got, err := sets.Get(ctx, "auto", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(got.Finalizers, "nodeset.dev/nodes"), fmt.Sprint(got.Finalizers)
	})

	eventually(t, time.Minute, "the victim's Node stays the victim's", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, victim, "v")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprintf("%d Nodes, %v", len(nodes), err)
		}
		return nodes[0].Name == victimNodes[0].Name && nodes[0].DeletionTimestamp == nil, nodes[0].Name
	})
	eventually(t, 2*time.Minute, "the autoscaled set keeps its two Nodes", converged(c, t, attacker, "auto", 2))
	ns, _ := peak.peaks(attacker)
	assert.Equal(t, 2, ns, "the namespace never ran more than maxNodesPerNamespace")
}
