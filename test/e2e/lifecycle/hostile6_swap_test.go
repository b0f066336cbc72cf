package lifecycle

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestANodeSetMadeAgainWithAnotherClassDoesNotTakeTheOldNodes: a NodeSet's
// class cannot be changed; a tenant who wants another class makes another
// NodeSet. A tenant may take nodeset's finalizer off its NodeSet, delete
// it and make it again at once under the same name with another class,
// before the nodeset controller has seen the first one go (it is
// restarting, or simply slower than two requests). The old set's Nodes
// carry only its namespace and name, so the new set would hold them as
// its own: Nodes of a class it is not of, which with OnDelete it keeps
// for good, running and counted for a class the set does not use, while
// the old set's Nodes are to go whatever its finalizers. They go.
func TestANodeSetMadeAgainWithAnotherClassDoesNotTakeTheOldNodes(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "hostile6-swap")
	createClass(t, "hostile6-swap-a", nil)
	createClass(t, "hostile6-swap-b", nil)
	waitClassValid(t, "hostile6-swap-a")
	waitClassValid(t, "hostile6-swap-b")
	_, cs := tenant(t, "tenant-a", ns)

	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("swap", "hostile6-swap-a", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the set's first Node", converged(c, t, ns, "swap", 1))
	old, err := setNodes(ctx, t, ns, "swap")
	require.NoError(t, err)
	require.Len(t, old, 1)
	oldNode := old[0].Name

	// The nodeset controller is away while the tenant swaps the set.
	c.nodeset.Kill(syscall.SIGKILL)
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Patch(ctx, "swap", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "swap", metav1.DeleteOptions{}))
	again := tenantSet("swap", "hostile6-swap-b", 1)
	again.Spec.Strategy = nodesetv1alpha1.NodeSetStrategy{Type: nodesetv1alpha1.OnDeleteStrategy}
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, again, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.nodeset.Start())

	kube, _ := clients(t)
	eventually(t, 2*time.Minute, "the old set's Node of the other class is gone", func(ctx context.Context) (bool, string) {
		node, err := kube.CoreV1().Nodes().Get(ctx, oldNode, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("%s of NodeClass %s is there, deleting: %v", oldNode, node.Labels[nodesetv1alpha1.LabelNodeClass], node.DeletionTimestamp != nil)
	})
	eventually(t, 2*time.Minute, "the new set's Node of its own class", func(ctx context.Context) (bool, string) {
		ok, why := converged(c, t, ns, "swap", 1)(ctx)
		if !ok {
			return false, why
		}
		nodes, err := setNodes(ctx, t, ns, "swap")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprintf("%d nodes, %v", len(nodes), err)
		}
		return nodes[0].Labels[nodesetv1alpha1.LabelNodeClass] == "hostile6-swap-b", nodes[0].Name + " of " + nodes[0].Labels[nodesetv1alpha1.LabelNodeClass]
	})
}
