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

// acceptedWith waits until the set's Accepted condition, for its current
// generation, is False with reason and a message naming field, and then
// checks that the set has no Node.
func acceptedWith(t *testing.T, namespace, name, reason, field string) {
	t.Helper()
	_, cs := clients(t)
	eventually(t, time.Minute, name+": "+reason, func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if accepted == nil || accepted.ObservedGeneration != got.Generation {
			return false, "no Accepted condition for this generation yet"
		}
		return accepted.Status == metav1.ConditionFalse && accepted.Reason == reason && strings.Contains(accepted.Message, field),
			accepted.Reason + ": " + accepted.Message
	})
	nodes, err := setNodes(context.Background(), t, namespace, name)
	require.NoError(t, err)
	assert.Empty(t, nodes, "%s: no Node", name)
}

// TestNoNewNodeSetOfADeletingClassWithoutTheWebhook: while a NodeClass is
// being deleted its NodeSets keep working, and a NodeSet created after the
// deletion began gets no Node: the webhook refuses it (NodeClassDeleting),
// and without the webhook the controller reports the same reason and makes
// nothing. Nor does such a NodeSet hold the class: it goes with the last
// NodeSet that was there before its deletion.
func TestNoNewNodeSetOfADeletingClassWithoutTheWebhook(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "probe-deleting")
	_, tenantCS := tenant(t, "tenant-a", ns)
	createClass(t, "probe-deleting", nil)
	createSet(t, ns, "before", "probe-deleting", 1)
	eventually(t, 2*time.Minute, "the set made before the deletion", converged(c, t, ns, "before", 1))
	withoutWebhook(t)

	require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, "probe-deleting", metav1.DeleteOptions{}))
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "probe-deleting", metav1.GetOptions{})
	require.NoError(t, err, "the class in use stays")
	require.NotNil(t, class.DeletionTimestamp)
	deleted := class.DeletionTimestamp.Time
	// Timestamps are whole seconds: the late set is created in a later
	// second than the deletion, so that it is after it for everyone.
	eventually(t, 5*time.Second, "a second after the deletion", func(context.Context) (bool, string) {
		return time.Now().After(deleted.Add(time.Second)), "the deletion was at " + deleted.String()
	})
	late, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("late", "probe-deleting", 2), metav1.CreateOptions{})
	require.NoError(t, err, "no webhook, the schema admits it")
	require.True(t, late.CreationTimestamp.After(deleted), "created at %s, after the deletion at %s", late.CreationTimestamp, deleted)
	acceptedWith(t, ns, "late", "NodeClassDeleting", `NodeClass "probe-deleting" is being deleted`)

	// The set from before still scales, and the class goes with it alone.
	scale(t, ns, "before", 2)
	eventually(t, 2*time.Minute, "the set from before still scales", converged(c, t, ns, "before", 2))
	nodes, err := setNodes(ctx, t, ns, "late")
	require.NoError(t, err)
	assert.Empty(t, nodes, "still no Node for the late set")
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "before", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the class goes with the last set from before", func(ctx context.Context) (bool, string) {
		_, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "probe-deleting", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	acceptedWith(t, ns, "late", "NodeClassNotFound", `"probe-deleting"`)
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "late", metav1.DeleteOptions{}))
}

// TestKubeletArgumentsCannotEscapeTheBootstrap: a tenant allowed to set
// kubelet arguments cannot smuggle --node-labels past the check by ending
// the value EKS's bootstrap.sh writes them into
// (Environment='KUBELET_EXTRA_ARGS=...' in a systemd drop-in) with a quote,
// an escape or a new line. Without the webhook such a NodeSet is
// InvalidTemplate naming the argument, and gets nothing.
func TestKubeletArgumentsCannotEscapeTheBootstrap(t *testing.T) {
	startControllers(t)
	ns := createNamespace(t, "probe-kubelet")
	_, tenantCS := tenant(t, "tenant-a", ns)
	createClass(t, "probe-kubelet", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.Driver, c.Spec.Simulated = nodesetv1alpha1.DriverEKSASG, nil
		c.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{
			ClusterName: "prod", Region: "eu-west-1", ImageID: "ami-0123456789abcdef0", InstanceType: "m5.large",
			Bootstrap: &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: []string{"--v=2"}},
		}
		c.Spec.TenantOverrides = []string{"bootstrap.kubeletExtraArgs", "bootstrap.format"}
	})
	withoutWebhook(t)

	for i, arg := range []string{
		"--v=2' 'KUBELET_EXTRA_ARGS=--node-labels=nodeset.dev/tenant=victim",
		"--v=2\nEnvironment='KUBELET_EXTRA_ARGS=--node-labels=nodeset.dev/tenant=victim'",
		`--v=2\x20--node-labels=nodeset.dev/tenant=victim`,
	} {
		set := tenantSet(fmt.Sprintf("escape-%d", i), "probe-kubelet", 1)
		set.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{KubeletExtraArgs: []string{arg}}}
		_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(context.Background(), set, metav1.CreateOptions{})
		require.NoError(t, err, "%q: no webhook, the schema admits it", arg)
		acceptedWith(t, ns, set.Name, "InvalidTemplate", "spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs[0]")
	}
}

// TestWhatTheClassStampsHoldsWithoutTheWebhook: what a NodeClass stamps on
// every Node is the admin's word to every tenant whose pods may land there.
// Without the webhook, a NodeSet that changes a label the class sets
// (lifecycle=spot to on-demand) is OverrideNotAllowed, and one that sets an
// annotation a driver of nodeset reads (simulated.nodeset.dev/unreachable,
// which would get the Node tainted NoExecute and other tenants' pods
// evicted past their PodDisruptionBudgets) is InvalidTemplate; neither gets
// a Node. Adding labels of its own, or repeating the class's, is fine.
func TestWhatTheClassStampsHoldsWithoutTheWebhook(t *testing.T) {
	c := startControllers(t)
	ns := createNamespace(t, "stamped")
	_, tenantCS := tenant(t, "tenant-a", ns)
	createClass(t, "stamped", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.NodeTemplate.Labels = map[string]string{"example.com/lifecycle": "spot"}
	})
	withoutWebhook(t)
	ctx := context.Background()

	relabelled := tenantSet("relabelled", "stamped", 1)
	relabelled.Spec.Template.Labels = map[string]string{"example.com/lifecycle": "on-demand"}
	unreachable := tenantSet("unreachable", "stamped", 1)
	unreachable.Spec.Template.Annotations = map[string]string{"simulated.nodeset.dev/unreachable": "yes"}
	fine := tenantSet("fine", "stamped", 1)
	fine.Spec.Template.Labels = map[string]string{"example.com/lifecycle": "spot", "tier": "web"}
	for _, set := range []*nodesetv1alpha1.NodeSet{relabelled, unreachable, fine} {
		_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, set, metav1.CreateOptions{})
		require.NoError(t, err, "%s: no webhook, the schema admits it", set.Name)
	}
	acceptedWith(t, ns, "relabelled", "OverrideNotAllowed", `spec.template.labels["example.com/lifecycle"]`)
	acceptedWith(t, ns, "unreachable", "InvalidTemplate", `spec.template.annotations key "simulated.nodeset.dev/unreachable"`)
	eventually(t, 2*time.Minute, "the set that adds to the class's labels", converged(c, t, ns, "fine", 1))
	nodes, err := setNodes(ctx, t, ns, "fine")
	require.NoError(t, err)
	for _, node := range nodes {
		assert.Equal(t, "spot", node.Labels["example.com/lifecycle"], node.Name)
		assert.Equal(t, "web", node.Labels["tier"], node.Name)
	}
}
