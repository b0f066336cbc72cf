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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestWhatTheClassStampsHoldsThroughTheDriverSection: a class that lets
// tenants set its machines' labels (simulated.labels, reported by the
// kubelet on every status it posts) stamps example.com/lifecycle=spot on
// every Node. A NodeSet that gives the same key another value through the
// driver section would have the kubelet rewrite the class's label on its
// Nodes, as one through its template would: the webhook refuses it and,
// without the webhook, it is OverrideNotAllowed and gets no Node. Labels of
// its own, and the class's value repeated, are fine, and the Node keeps the
// class's label once the kubelet has registered it.
func TestWhatTheClassStampsHoldsThroughTheDriverSection(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ns := createNamespace(t, "stamped-section")
	_, tenantCS := tenant(t, "tenant-a", ns)
	createClass(t, "stamped-section", func(c *nodesetv1alpha1.NodeClass) {
		c.Spec.NodeTemplate.Labels = map[string]string{"example.com/lifecycle": "spot"}
		c.Spec.TenantOverrides = []string{"labels"}
	})
	ctx := context.Background()
	relabelled := func(name string) *nodesetv1alpha1.NodeSet {
		set := tenantSet(name, "stamped-section", 1)
		set.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"example.com/lifecycle": "on-demand"}}
		return set
	}
	field := `spec.simulated.labels["example.com/lifecycle"]`

	_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, relabelled("hooked"), metav1.CreateOptions{})
	if assert.Error(t, err, "refused by the webhook") {
		assert.Contains(t, err.Error(), "OverrideNotAllowed")
		assert.Contains(t, err.Error(), field)
	}

	withoutWebhook(t)
	_, err = tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, relabelled("unhooked"), metav1.CreateOptions{})
	require.NoError(t, err, "no webhook, the schema admits it")
	fine := tenantSet("fine", "stamped-section", 1)
	fine.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"example.com/lifecycle": "spot", "tier": "web"}}
	_, err = tenantCS.NodesetV1alpha1().NodeSets(ns).Create(ctx, fine, metav1.CreateOptions{})
	require.NoError(t, err)

	acceptedWith(t, ns, "unhooked", "OverrideNotAllowed", field)
	eventually(t, 2*time.Minute, "the set that adds to the class's labels", converged(c, t, ns, "fine", 1))
	eventually(t, time.Minute, "its Node registered with the labels of both", func(ctx context.Context) (bool, string) {
		nodes, err := setNodes(ctx, t, ns, "fine")
		if err != nil || len(nodes) != 1 {
			return false, fmt.Sprintf("%d nodes: %v", len(nodes), err)
		}
		node := nodes[0]
		ready := false
		for _, cond := range node.Status.Conditions {
			ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
		}
		return ready && node.Labels["tier"] == "web" && node.Labels["example.com/lifecycle"] == "spot",
			fmt.Sprintf("ready %v, labels %v", ready, node.Labels)
	})
	got, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "unhooked", metav1.GetOptions{})
	require.NoError(t, err)
	nodes, err := setNodes(ctx, t, ns, got.Name)
	require.NoError(t, err)
	assert.Empty(t, nodes, "the set that would change the class's label still has no Node")
}

// TestARefusalTooLongForAConditionIsStillTold: without the webhook, a
// NodeSet with 64 template labels whose keys break the label syntax and are
// reserved, each at the schema's length bound, has a refusal of some 100 KB,
// more than a condition's message may hold (32768 characters). Its Accepted
// condition still says InvalidTemplate, naming the first field, so the
// tenant sees why the set gets no Node, as for any other refusal, and its
// status is kept current.
func TestARefusalTooLongForAConditionIsStillTold(t *testing.T) {
	startControllers(t)
	ns := createNamespace(t, "long-refusal")
	_, tenantCS := tenant(t, "tenant-a", ns)
	createClass(t, "long-refusal", nil)
	withoutWebhook(t)
	set := tenantSet("long", "long-refusal", 1)
	set.Spec.Template.Labels = map[string]string{}
	for i := range 64 {
		key := fmt.Sprintf("%s.kubernetes.io/%s%02d", strings.Repeat("a", 230), strings.Repeat("B", 61), i)
		set.Spec.Template.Labels[key] = strings.Repeat("-", 63)
	}
	_, err := tenantCS.NodesetV1alpha1().NodeSets(ns).Create(context.Background(), set, metav1.CreateOptions{})
	require.NoError(t, err, "no webhook, the schema admits it")
	acceptedWith(t, ns, "long", "InvalidTemplate", "spec.template.labels key")
}
