package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
)

// TestANamespaceTheClassRefusesDoesNotHoldItsDeletion: a tenant whose
// namespace may not use a NodeClass stores a NodeSet of it while the
// webhook is away. The set is NamespaceNotAllowed and gets no Node, and it
// does not keep the admin from deleting the class either: the class waits
// for the NodeSets of the namespaces it admits (the NodeClassInUse Event
// names them, not the squatter), and goes with the last of them.
func TestANamespaceTheClassRefusesDoesNotHoldItsDeletion(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	allowed := createNamespace(t, "hold-allowed")
	squatter := createNamespace(t, "hold-squatter")
	_, squatterCS := tenant(t, "tenant-b", squatter)
	createClass(t, "hold-listed", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{allowed}}
	})
	t.Cleanup(func() {
		for _, ns := range []string{allowed, squatter} {
			_ = cs.NodesetV1alpha1().NodeSets(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		}
		eventually(t, 2*time.Minute, "the test's Nodes and machines are gone", func(ctx context.Context) (bool, string) {
			nodes, err := setNodes(ctx, t, allowed, "user")
			if err != nil {
				return false, err.Error()
			}
			all, ok := c.machines(ctx)
			if !ok {
				return false, "node controller not answering /debug/machines"
			}
			machines := setMachines(all, allowed, "user")
			return len(nodes) == 0 && len(machines) == 0, fmt.Sprintf("%d Nodes and %d machines left", len(nodes), len(machines))
		})
		_ = cs.NodesetV1alpha1().NodeClasses().Delete(context.Background(), "hold-listed", metav1.DeleteOptions{})
	})
	createSet(t, allowed, "user", "hold-listed", 1)
	eventually(t, 2*time.Minute, "the admitted namespace's node", converged(c, t, allowed, "user", 1))

	withoutWebhook(t)
	_, err := squatterCS.NodesetV1alpha1().NodeSets(squatter).Create(ctx, tenantSet("squat", "hold-listed", 1), metav1.CreateOptions{})
	require.NoError(t, err, "no webhook, the schema admits it")
	acceptedWith(t, squatter, "squat", "NamespaceNotAllowed", "spec.allowedNamespaces")

	t.Log("the squatter's set is refused; deleting the class")
	require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, "hold-listed", metav1.DeleteOptions{}))
	kube, _ := clients(t)
	eventually(t, time.Minute, "a NodeClassInUse Event naming the admitted set alone", func(ctx context.Context) (bool, string) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hold-listed"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.Reason != nodesetcontroller.ReasonClassInUse {
				continue
			}
			if strings.Contains(e.Message, "NodeSet "+allowed+"/user") && !strings.Contains(e.Message, squatter) {
				return true, ""
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Sprint(seen)
	})

	t.Log("deleting the admitted namespace's set")
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(allowed).Delete(ctx, "user", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the class goes with the last NodeSet of a namespace it admits", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "hold-listed", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("still there, finalizers %v", class.Finalizers)
	})
	acceptedWith(t, squatter, "squat", "NodeClassNotFound", `"hold-listed"`)
}
