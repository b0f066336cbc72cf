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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeset.dev/nodeset/pkg/autoscaler/protos"
)

// TestAutoscalerLoopOutlivesDeletedSets: cluster-autoscaler lists the
// node groups once at the start of a loop (Refresh, then NodeGroups,
// cached until the next Refresh) and then asks NodeGroupTargetSize and
// NodeGroupNodes of every group of that list (clusterstate's
// getTargetSizes and its instance cache), and NodeGroupTemplateNodeInfo of
// every group of it with no Node Ready for a minute to copy (its template
// node infos). An error from either of the first two aborts the whole
// loop: no group is scaled up or down in it; so does one from the
// template, but Unimplemented ("no template"), up to cluster-autoscaler
// 1.33 (1.34 and later log it and go on without that group's template). A tenant who deletes a NodeSet, or takes its
// spec.autoscaling away, in the meantime (again and again, if it likes)
// must not cost every other tenant that loop; scaling the set stays
// refused.
func TestAutoscalerLoopOutlivesDeletedSets(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "ca-loop")
	createClass(t, "ca-loop", twoCPUs)
	for _, name := range []string{"deleted", "manual", "gone"} {
		createAutoscaledSet(t, ns, name, "ca-loop", 5)
		scale(t, ns, name, 1)
	}
	for _, name := range []string{"deleted", "manual", "gone"} {
		eventually(t, 2*time.Minute, name+": one node", converged(c, t, ns, name, 1))
	}
	ca := autoscalerClient(t, c)

	// The loop starts.
	_, err := ca.Refresh(ctx, &protos.RefreshRequest{})
	require.NoError(t, err)
	groups, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, g := range groups.NodeGroups {
		ids[g.Id] = true
	}
	for _, name := range []string{"deleted", "manual", "gone"} {
		require.True(t, ids[ns+"/"+name], "%s listed", name)
	}

	// Meanwhile: "deleted" is being deleted (held by a finalizer of its
	// owner's), "manual" loses spec.autoscaling, "gone" is deleted for good.
	set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "deleted", metav1.GetOptions{})
	require.NoError(t, err)
	set.Finalizers = append(set.Finalizers, "example.com/hold")
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(context.Background(), "deleted", metav1.GetOptions{})
		if err != nil {
			return
		}
		set.Finalizers = nil
		_, _ = cs.NodesetV1alpha1().NodeSets(ns).Update(context.Background(), set, metav1.UpdateOptions{})
	})
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "deleted", metav1.DeleteOptions{}))
	set, err = cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "manual", metav1.GetOptions{})
	require.NoError(t, err)
	set.Spec.Autoscaling = nil
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Update(ctx, set, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "gone", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, `"gone" gone`, func(ctx context.Context) (bool, string) {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// The server has seen all three: a fresh list has none of them.
	eventually(t, time.Minute, "no longer node groups", func(ctx context.Context) (bool, string) {
		fresh, err := ca.NodeGroups(ctx, &protos.NodeGroupsRequest{})
		if err != nil {
			return false, err.Error()
		}
		var still []string
		for _, g := range fresh.NodeGroups {
			if g.Id == ns+"/deleted" || g.Id == ns+"/manual" || g.Id == ns+"/gone" {
				still = append(still, g.Id)
			}
		}
		return len(still) == 0, fmt.Sprintf("still listed: %v", still)
	})

	// The rest of the loop, with the list it started with.
	for _, g := range groups.NodeGroups {
		_, err := ca.NodeGroupTargetSize(ctx, &protos.NodeGroupTargetSizeRequest{Id: g.Id})
		assert.NoError(t, err, "NodeGroupTargetSize(%s): an error aborts cluster-autoscaler's loop (getTargetSizes)", g.Id)
		_, err = ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: g.Id})
		assert.NoError(t, err, "NodeGroupNodes(%s): an error aborts cluster-autoscaler's loop (its instance cache)", g.Id)
		_, err = ca.NodeGroupTemplateNodeInfo(ctx, &protos.NodeGroupTemplateNodeInfoRequest{Id: g.Id})
		if err != nil {
			assert.Equal(t, codes.Unimplemented.String(), status.Code(err).String(),
				"NodeGroupTemplateNodeInfo(%s): any error but Unimplemented aborts cluster-autoscaler's loop up to 1.33 (its template node infos): %v", g.Id, err)
		}
	}
	// No pending instance of a set no longer a group: its fake nodes
	// would be unregistered nodes of no group.
	for _, name := range []string{"deleted", "manual", "gone"} {
		instances, err := ca.NodeGroupNodes(ctx, &protos.NodeGroupNodesRequest{Id: ns + "/" + name})
		require.NoError(t, err)
		for _, i := range instances.Instances {
			assert.NotContains(t, i.Id, "nodeset-pending://", "%s", name)
		}
	}
	// Writes stay refused.
	for _, name := range []string{"deleted", "manual", "gone"} {
		_, err := ca.NodeGroupIncreaseSize(ctx, &protos.NodeGroupIncreaseSizeRequest{Id: ns + "/" + name, Delta: 1})
		assert.Equal(t, codes.NotFound, status.Code(err), "IncreaseSize(%s): %v", name, err)
	}
}
