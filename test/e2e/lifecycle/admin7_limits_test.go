package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAdmin7ALimitLoweredBelowUse: the admin lowers a class's
// maxNodesPerNamespace below what a NodeSet has. No Node is deleted; the
// set says LimitExceeded with the numbers; a scale-down still removes
// Nodes (LimitExceeded freezes nothing) and a scale-up back makes none
// while the limit holds. Raised again, the limit lets the set grow.
func TestAdmin7ALimitLoweredBelowUse(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "admin7-limits")
	createClass(t, "admin7-limits", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodesPerNamespace: ptr.To[int32](3)}
	})
	waitClassValid(t, "admin7-limits")
	createSet(t, ns, "web", "admin7-limits", 3)
	eventually(t, 2*time.Minute, "three Nodes", converged(c, t, ns, "web", 3))
	before, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)

	setLimit := func(limit int32) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-limits", metav1.GetOptions{})
		require.NoError(t, err)
		class.Spec.Limits.MaxNodesPerNamespace = ptr.To(limit)
		_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	accepted := func(reason, message string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if cond == nil || cond.ObservedGeneration != set.Generation || set.Status.ObservedGeneration != set.Generation {
				return false, fmt.Sprintf("Accepted: %+v", cond)
			}
			return cond.Reason == reason && strings.Contains(cond.Message, message), cond.Reason + ": " + cond.Message
		}
	}
	setLimit(1)
	eventually(t, time.Minute, "LimitExceeded with the numbers", accepted("LimitExceeded", "maxNodesPerNamespace"))
	nodes, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	require.Len(t, nodes, len(before), "lowering a limit deletes nothing")
	for _, n := range nodes {
		require.Nil(t, n.DeletionTimestamp, "%s kept", n.Name)
	}

	scale(t, ns, "web", 2)
	eventually(t, 2*time.Minute, "the scale-down carried out", converged(c, t, ns, "web", 2))
	withoutWebhook(t)
	scale(t, ns, "web", 3)
	eventually(t, time.Minute, "the scale-up judged", accepted("LimitExceeded", "maxNodesPerNamespace"))
	nodes, err = setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	require.Len(t, nodes, 2, "no Node past the lowered limit")

	setLimit(5)
	eventually(t, 2*time.Minute, "three Nodes under the raised limit", converged(c, t, ns, "web", 3))
	eventually(t, time.Minute, "accepted again", accepted("Accepted", ""))
}
