package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestDeleteNodesAnnotationReachesOnlyTheSetsOwnNodes: a tenant lists in
// its NodeSet's delete-nodes annotation a Node of another namespace's
// NodeSet (of the same name) and a Node nodeset does not manage, beside one
// of its own. The webhook admits any change of a NodeSet's metadata, so
// the controllers alone keep the rule: only the set's own Node goes; the
// names of the others are dropped from the annotation and nothing else
// happens to them.
func TestDeleteNodesAnnotationReachesOnlyTheSetsOwnNodes(t *testing.T) {
	c := startControllers(t)
	kube, _ := clients(t)
	ctx := context.Background()
	victimNS, attackerNS := createNamespace(t, "hostile2-victim"), createNamespace(t, "hostile2-attacker")
	createClass(t, "hostile2-delete", nil)
	createSet(t, victimNS, "web", "hostile2-delete", 1)
	eventually(t, 2*time.Minute, "the victim's set", converged(c, t, victimNS, "web", 1))
	_, attacker := tenant(t, "tenant-a", attackerNS)
	_, err := attacker.NodesetV1alpha1().NodeSets(attackerNS).Create(ctx, tenantSet("web", "hostile2-delete", 1), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "the attacker's set", converged(c, t, attackerNS, "web", 1))
	bystander, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hostile2-bystander"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), bystander.Name, metav1.DeleteOptions{}) })

	victims, err := setNodes(ctx, t, victimNS, "web")
	require.NoError(t, err)
	own, err := setNodes(ctx, t, attackerNS, "web")
	require.NoError(t, err)
	require.Len(t, victims, 1)
	require.Len(t, own, 1)
	listed := fmt.Sprintf("%s,%s,%s", victims[0].Name, bystander.Name, own[0].Name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nodesetv1alpha1.AnnotationDeleteNodes, listed)
	_, err = attacker.NodesetV1alpha1().NodeSets(attackerNS).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err, "a tenant may annotate its own NodeSet")

	// The attacker's own Node goes and is replaced; the annotation is
	// emptied as the listed Nodes are found gone or not the set's.
	eventually(t, 2*time.Minute, "the attacker's listed Node replaced and the list emptied", func(ctx context.Context) (bool, string) {
		set, err := attacker.NodesetV1alpha1().NodeSets(attackerNS).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if left := set.Annotations[nodesetv1alpha1.AnnotationDeleteNodes]; left != "" {
			return false, "delete-nodes still lists " + left
		}
		_, err = kube.CoreV1().Nodes().Get(ctx, own[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("the attacker's listed Node: %v", err)
	})
	eventually(t, 2*time.Minute, "the attacker's set back at one Node", converged(c, t, attackerNS, "web", 1))
	for _, name := range []string{victims[0].Name, bystander.Name} {
		node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, "%s is still there", name)
		assert.Nil(t, node.DeletionTimestamp, "%s is not being deleted", name)
	}
	eventually(t, time.Minute, "the victim's set untouched", converged(c, t, victimNS, "web", 1))
	after, err := setNodes(ctx, t, victimNS, "web")
	require.NoError(t, err)
	require.Len(t, after, 1)
	assert.Equal(t, victims[0].UID, after[0].UID, "the victim's Node is the one it had")
}

// TestNodesOfANodeSetDeletedWithoutItsFinalizerGo: a tenant takes the
// nodeset.dev/nodes finalizer off its NodeSet and deletes it, so the
// NodeSet is gone at once. Its Nodes must not outlive it: left, they and
// their machines would run on unowned and unseen by any NodeSet, counting
// against the class's limits for every tenant.
func TestNodesOfANodeSetDeletedWithoutItsFinalizerGo(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "hostile2-unfinalized")
	createClass(t, "hostile2-unfinalized", nil)
	_, tenantCS := tenant(t, "tenant-a", ns)
	_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("leaky", "hostile2-unfinalized", 2), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "two Nodes", converged(c, t, ns, "leaky", 2))

	_, err = tenantCS.NodesetV1alpha1().NodeSets(ns).Patch(ctx, "leaky", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err, "the tenant takes the finalizer off")
	require.NoError(t, tenantCS.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "leaky", metav1.DeleteOptions{}))
	eventually(t, 30*time.Second, "the NodeSet gone", func(ctx context.Context) (bool, string) {
		_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Get(ctx, "leaky", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	eventually(t, 2*time.Minute, "the Nodes and machines of the deleted set gone", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "leaky")
		if err != nil {
			return false, err.Error()
		}
		all, ok := c.machines(ctx)
		if !ok {
			return false, "node controller not answering /debug/machines"
		}
		machines := setMachines(all, ns, "leaky")
		return len(nodes) == 0 && len(machines) == 0, fmt.Sprintf("%d Nodes and %d machines left", len(nodes), len(machines))
	})
}

// TestTemplateAnnotationsLeaveRoomOnTheNode: a Node's annotations are at
// most 256 KiB, and nodeset records a Node's life there (its driver, when
// its machine was made, its drain). A NodeSet whose template annotations,
// with its class's, fill that budget would get Nodes nodeset can no longer
// write: never registered, and once deleted, terminating forever with
// their machines, counting against the class's limits. Without the webhook
// such a NodeSet is InvalidTemplate and gets no Node.
func TestTemplateAnnotationsLeaveRoomOnTheNode(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	ns := createNamespace(t, "hostile2-annotations")
	createClass(t, "hostile2-annotations", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.NodeTemplate.Annotations = map[string]string{"example.com/pool": "general"}
	})
	withoutWebhook(t)
	_, tenantCS := tenant(t, "tenant-a", ns)
	key := "example.com/filler"
	for _, tt := range []struct {
		name string
		size int // of the set's annotations, keys and values
	}{
		{"fills-the-node", 262144 - len("example.com/pool") - len("general") - len("nodeset.dev/driver") - len("simulated") - 1},
		{"at-the-schema-bound", 262144},
	} {
		set := tenantSet(tt.name, "hostile2-annotations", 1)
		set.Spec.Template.Annotations = map[string]string{key: strings.Repeat("x", tt.size-len(key))}
		_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, set, metav1.CreateOptions{})
		require.NoError(t, err, "%s: the schema admits it", tt.name)
		acceptedWith(t, ns, tt.name, "InvalidTemplate", "spec.template.annotations")
	}
}
