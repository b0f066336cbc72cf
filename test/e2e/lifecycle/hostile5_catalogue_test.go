package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAnotherClassesStampIsNotForged: the labels a NodeClass stamps on
// its Nodes (example.com/pool=gpu on the GPU class of one namespace) are
// what other tenants' pods select to land on those Nodes. A tenant of
// another class that labels its own Nodes example.com/pool=gpu would draw
// those pods onto Nodes it controls, where the GPU class's taint does not
// keep them off. With the webhook such a NodeSet is refused; without it,
// it is OverrideNotAllowed and gets no Node. A value no class stamps, and
// the value the set's own class stamps, stay the tenant's.
func TestAnotherClassesStampIsNotForged(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	victimNS, attackerNS := createNamespace(t, "hostile5-gpu-team"), createNamespace(t, "hostile5-forger")
	createClass(t, "hostile5-gpu", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Tenancy = nodesetv1alpha1.TenancyDedicated
		c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{victimNS}}
		c.Spec.NodeTemplate.Labels = map[string]string{"hostile5.example.com/pool": "gpu"}
	})
	createClass(t, "hostile5-general", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.NodeTemplate.Labels = map[string]string{"example.com/tier": "general"}
	})
	waitClassValid(t, "hostile5-gpu")
	waitClassValid(t, "hostile5-general")
	_, attacker := tenant(t, "tenant-a", attackerNS)

	forged := func(name string) *nodesetv1alpha1.NodeSet {
		set := tenantSet(name, "hostile5-general", 1)
		set.Spec.Template.Labels = map[string]string{"hostile5.example.com/pool": "gpu"}
		return set
	}
	_, err := attacker.NodesetV1alpha1().NodeSets(attackerNS).Create(ctx, forged("forged"), metav1.CreateOptions{})
	require.Error(t, err, "the webhook refuses a label another class stamps")
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `spec.template.labels["hostile5.example.com/pool"]`)
	assert.Contains(t, err.Error(), "hostile5-gpu")

	fine := tenantSet("fine", "hostile5-general", 1)
	fine.Spec.Template.Labels = map[string]string{"hostile5.example.com/pool": "batch", "example.com/tier": "general"}
	_, err = attacker.NodesetV1alpha1().NodeSets(attackerNS).Create(ctx, fine, metav1.CreateOptions{})
	require.NoError(t, err, "a value no class stamps, and the own class's, are the tenant's")
	idle := tenantSet("idle", "hostile5-general", 0)
	idle.Spec.Template.Labels = map[string]string{"hostile5.example.com/pool": "batch"}
	_, err = attacker.NodesetV1alpha1().NodeSets(attackerNS).Create(ctx, idle, metav1.CreateOptions{})
	require.NoError(t, err)

	withoutWebhook(t)
	_, err = attacker.NodesetV1alpha1().NodeSets(attackerNS).Create(ctx, forged("forged"), metav1.CreateOptions{})
	require.NoError(t, err, "no webhook: the schema admits it")
	acceptedWith(t, attackerNS, "forged", "OverrideNotAllowed", `spec.template.labels["hostile5.example.com/pool"]`)
	eventually(t, 2*time.Minute, "the set with labels of its own", converged(c, t, attackerNS, "fine", 1))

	// A class the admin adds later that stamps example.com/pool=batch
	// makes the label the admin's: the sets that have it are told at
	// once, the one with no Node (nothing else syncs it) too, and keep
	// the Nodes they have.
	createClass(t, "hostile5-batch", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.NodeTemplate.Labels = map[string]string{"hostile5.example.com/pool": "batch"}
	})
	for _, name := range []string{"idle", "fine"} {
		eventually(t, time.Minute, name+" told of the new class's label", func(ctx context.Context) (bool, string) {
			got, err := attacker.NodesetV1alpha1().NodeSets(attackerNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			accepted := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if accepted == nil {
				return false, "no Accepted condition"
			}
			return accepted.Reason == "OverrideNotAllowed" && strings.Contains(accepted.Message, "NodeClass hostile5-batch"), accepted.Reason + ": " + accepted.Message
		})
	}
	nodes, err := setNodes(ctx, t, attackerNS, "fine")
	require.NoError(t, err)
	assert.Len(t, nodes, 1, "no Node is removed for it")
}

// TestNodesOfADeletedNodeSetGoWhateverItsFinalizers: a tenant swaps the
// nodeset.dev/nodes finalizer of its NodeSet for one of its own and
// deletes the set, which then stays, being deleted, for as long as the
// tenant likes. Its Nodes must go all the same: left, they and their
// machines run on with no NodeSet acting for them (a deleted set is
// never scaled), counting against the class's limits for every tenant.
func TestNodesOfADeletedNodeSetGoWhateverItsFinalizers(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "hostile5-held")
	createClass(t, "hostile5-held", nil)
	_, tenantCS := tenant(t, "tenant-a", ns)
	sets := tenantCS.NodesetV1alpha1().NodeSets(ns)
	_, err := sets.Create(ctx, tenantSet("held", "hostile5-held", 2), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "two Nodes", converged(c, t, ns, "held", 2))
	t.Cleanup(func() {
		if set, err := sets.Get(context.Background(), "held", metav1.GetOptions{}); err == nil {
			set.Finalizers = nil
			_, _ = sets.Update(context.Background(), set, metav1.UpdateOptions{})
		}
	})

	// The controller puts its finalizer back on a set that is not being
	// deleted: the swap and the deletion must meet on one version.
	const hold = "example.com/hold"
	eventually(t, time.Minute, "the set deleted with only the tenant's finalizer", func(ctx context.Context) (bool, string) {
		set, err := sets.Get(ctx, "held", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if set.DeletionTimestamp != nil {
			return len(set.Finalizers) == 1 && set.Finalizers[0] == hold, fmt.Sprintf("finalizers %v", set.Finalizers)
		}
		set.Finalizers = []string{hold}
		updated, err := sets.Update(ctx, set, metav1.UpdateOptions{})
		if err != nil {
			return false, err.Error()
		}
		err = sets.Delete(ctx, "held", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &updated.ResourceVersion}})
		return false, fmt.Sprintf("delete: %v", err)
	})

	eventually(t, 2*time.Minute, "the Nodes and machines of the deleted set gone", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "held")
		if err != nil {
			return false, err.Error()
		}
		all, ok := c.machines(ctx)
		if !ok {
			return false, "node controller not answering /debug/machines"
		}
		machines := setMachines(all, ns, "held")
		names := make([]string, 0, len(nodes))
		for _, n := range nodes {
			names = append(names, n.Name)
		}
		return len(nodes) == 0 && len(machines) == 0, fmt.Sprintf("%d Nodes (%s) and %d machines left", len(nodes), strings.Join(names, ", "), len(machines))
	})
	set, err := sets.Get(ctx, "held", metav1.GetOptions{})
	require.NoError(t, err, "the set stays while the tenant's finalizer holds it")
	assert.NotNil(t, set.DeletionTimestamp)
}
