package lifecycle

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodesetcontroller "nodeset.dev/nodeset/pkg/controller/nodeset"
	"nodeset.dev/nodeset/test/framework"
)

// withoutWebhook removes the nodeset webhook's registration for the rest of
// the test, as an outage with failurePolicy Ignore does, and puts it back
// afterwards.
func withoutWebhook(t *testing.T) {
	t.Helper()
	kube, _ := clients(t)
	ctx := context.Background()
	hooks := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	saved, err := hooks.Get(ctx, "nodeset.dev", metav1.GetOptions{})
	require.NoError(t, err)
	require.NoError(t, hooks.Delete(ctx, saved.Name, metav1.DeleteOptions{}))
	eventually(t, time.Minute, "the API server has dropped the webhook", webhookAnswers(t, false))
	t.Cleanup(func() {
		restored := &admissionv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: saved.Name, Labels: saved.Labels}, Webhooks: saved.Webhooks}
		_, err := hooks.Create(context.Background(), restored, metav1.CreateOptions{})
		require.NoError(t, err, "the webhook is registered again")
		eventually(t, time.Minute, "the API server calls the webhook again", webhookAnswers(t, true))
	})
}

// webhookAnswers probes whether the API server calls the NodeSet webhook:
// only the webhook refuses a NodeSet of a class that does not exist.
func webhookAnswers(t *testing.T, want bool) func(ctx context.Context) (bool, string) {
	_, cs := clients(t)
	return func(ctx context.Context) (bool, string) {
		probe := tenantSet("webhook-probe", "no-such-class-for-the-probe", 0)
		_, err := cs.NodesetV1alpha1().NodeSets("default").Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = cs.NodesetV1alpha1().NodeSets("default").Delete(ctx, probe.Name, metav1.DeleteOptions{})
		}
		refused := err != nil && strings.Contains(err.Error(), "NodeClassNotFound")
		return refused == want, fmt.Sprintf("create answered %v", err)
	}
}

// boundaryCase is a NodeSet that breaks a rule protecting other tenants.
type boundaryCase struct {
	name   string
	class  string
	mutate func(*nodesetv1alpha1.NodeSet)
	reason string
	field  string
}

func boundaryCases() []boundaryCase {
	return []boundaryCase{
		{"namespace not allowed", "boundary-listed", nil, "NamespaceNotAllowed", "spec.allowedNamespaces"},
		{"namespace not allowed, class not validated", "boundary-unserved", nil, "NamespaceNotAllowed", "spec.allowedNamespaces"},
		{"restricted override", "boundary-open", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.huge"}
		}, "OverrideNotAllowed", "spec.simulated.instanceType"},
		{"node-role label", "boundary-open", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
		}, "InvalidTemplate", "spec.template.labels"},
		{"node-restriction taint", "boundary-open", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Template.Taints = []nodesetv1alpha1.Taint{{Key: "node-restriction.kubernetes.io/pci", Effect: "NoSchedule"}}
		}, "InvalidTemplate", "spec.template.taints[0].key"},
		{"another tenant's NodeSet label through the kubelet", "boundary-open", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{
				nodesetv1alpha1.LabelNodeSet: "victim", nodesetv1alpha1.LabelNodeSetNamespace: "boundary-victim"}}
		}, "InvalidTemplate", "spec.simulated.labels"},
		{"topology label through the kubelet", "boundary-open", func(s *nodesetv1alpha1.NodeSet) {
			s.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"topology.kubernetes.io/zone": "z"}}
		}, "InvalidTemplate", "spec.simulated.labels"},
	}
}

func createBoundaryClasses(t *testing.T) {
	t.Helper()
	only := func(namespace string) func(*nodesetv1alpha1.NodeClass) {
		return func(c *nodesetv1alpha1.NodeClass) {
			c.Spec.AllowedNamespaces = &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromList, Namespaces: []string{namespace}}
		}
	}
	boundaryClassesOnce.Do(func() {
		createClass(t, "boundary-listed", only("boundary-victim"))
		createClass(t, "boundary-unserved", func(c *nodesetv1alpha1.NodeClass) {
			only("boundary-victim")(c)
			c.Spec.Driver, c.Spec.Simulated = "no-such-driver", nil
			c.Spec.Parameters = &runtime.RawExtension{Raw: []byte(`{}`)}
		})
		createClass(t, "boundary-open", func(c *nodesetv1alpha1.NodeClass) {
			c.Spec.TenantOverrides = []string{"labels", "bootDelay"}
		})
		createClass(t, "boundary-limited", func(c *nodesetv1alpha1.NodeClass) {
			c.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](4), MaxNodesPerNamespace: ptr.To[int32](2)}
		})
	})
}

var boundaryClassesOnce sync.Once

// TestTenantRulesHoldWithoutTheWebhook: with the webhook registered, each
// rule that protects another tenant refuses the NodeSet at once, naming the
// field; with the webhook gone (an outage, failurePolicy Ignore), the
// controller refuses to act for it: Accepted=False with the same reason,
// and no Node, while the victim's NodeSet keeps its Nodes and scales.
func TestTenantRulesHoldWithoutTheWebhook(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	attacker, victim := createNamespace(t, "boundary-attacker"), createNamespace(t, "boundary-victim")
	createBoundaryClasses(t)
	createSet(t, victim, "victim", "boundary-open", 2)
	eventually(t, 2*time.Minute, "the victim's nodes", converged(c, t, victim, "victim", 2))

	for i, tt := range boundaryCases() {
		set := tenantSet(fmt.Sprintf("hooked-%d", i), tt.class, 1)
		if tt.mutate != nil {
			tt.mutate(set)
		}
		_, err := cs.NodesetV1alpha1().NodeSets(attacker).Create(ctx, set, metav1.CreateOptions{})
		if assert.Error(t, err, "%s: refused by the webhook", tt.name) {
			assert.Contains(t, err.Error(), tt.reason, tt.name)
			assert.Contains(t, err.Error(), tt.field, tt.name)
		}
	}

	withoutWebhook(t)
	for i, tt := range boundaryCases() {
		set := tenantSet(fmt.Sprintf("unhooked-%d", i), tt.class, 3)
		if tt.mutate != nil {
			tt.mutate(set)
		}
		_, err := cs.NodesetV1alpha1().NodeSets(attacker).Create(ctx, set, metav1.CreateOptions{})
		require.NoError(t, err, "%s: no webhook, the schema admits it", tt.name)
		eventually(t, time.Minute, tt.name+": not accepted by the controller", func(ctx context.Context) (bool, string) {
			got, err := cs.NodesetV1alpha1().NodeSets(attacker).Get(ctx, set.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			accepted := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if accepted == nil || accepted.ObservedGeneration != got.Generation {
				return false, "no Accepted condition for this generation yet"
			}
			return accepted.Status == metav1.ConditionFalse && accepted.Reason == tt.reason && strings.Contains(accepted.Message, tt.field),
				accepted.Reason + ": " + accepted.Message
		})
		nodes, err := setNodes(ctx, t, attacker, set.Name)
		require.NoError(t, err)
		assert.Empty(t, nodes, "%s: the controller made no Node", tt.name)
	}

	// The victim is untouched and still scales.
	require.NoError(t, framework.Scale(ctx, cs, victim, "victim", 3))
	eventually(t, 2*time.Minute, "the victim scales", converged(c, t, victim, "victim", 3))
}

// TestLimitsHoldWithoutTheWebhook: a NodeSet asking for the largest int32
// replicas of a limited class, admitted while the webhook is away, gets no
// more than its namespace's share, cannot lock other namespaces out of the
// class, and a NodeSet waiting for room gets its Node as soon as room frees.
func TestLimitsHoldWithoutTheWebhook(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	greedy, other := createNamespace(t, "limits-greedy"), createNamespace(t, "limits-other")
	createBoundaryClasses(t)
	withoutWebhook(t)

	createSet(t, greedy, "all", "boundary-limited", math.MaxInt32)
	eventually(t, 2*time.Minute, "the greedy set at its namespace's limit", limitExceededWith(t, greedy, "all", 2))
	createSet(t, other, "fair", "boundary-limited", 2)
	eventually(t, 2*time.Minute, "another namespace still gets its nodes", converged(c, t, other, "fair", 2))

	// A second set of the greedy namespace waits for room, and gets it as
	// soon as the first set is gone, without waiting for a resync.
	createSet(t, greedy, "waiting", "boundary-limited", 1)
	eventually(t, time.Minute, "the waiting set is over the limit", limitExceededWith(t, greedy, "waiting", 0))
	require.NoError(t, cs.NodesetV1alpha1().NodeSets(greedy).Delete(ctx, "all", metav1.DeleteOptions{}))
	eventually(t, time.Minute, "freed room goes to the waiting set at once", converged(c, t, greedy, "waiting", 1))
}

// limitExceededWith: the set is LimitExceeded with exactly n Nodes.
func limitExceededWith(t *testing.T, namespace, name string, n int) func(ctx context.Context) (bool, string) {
	_, cs := clients(t)
	return func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		nodes, err := setNodes(ctx, t, namespace, name)
		if err != nil {
			return false, err.Error()
		}
		accepted := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if accepted == nil {
			return false, "no Accepted condition yet"
		}
		return accepted.Reason == nodesetv1alpha1.ReasonLimitExceeded && len(nodes) == n,
			fmt.Sprintf("%d nodes; %s: %s", len(nodes), accepted.Reason, accepted.Message)
	}
}

// TestNodeClassInUseIsProtected: a NodeClass deleted while a NodeSet uses it
// stays until the NodeSet is gone, as a PersistentVolumeClaim in use does;
// meanwhile its NodeSet goes on working and no new NodeSet takes it.
func TestNodeClassInUseIsProtected(t *testing.T) {
	c := startControllers(t)
	_, cs := clients(t)
	ctx := context.Background()
	ns := createNamespace(t, "protected")
	createClass(t, "protected", nil)
	eventually(t, time.Minute, "the class carries the in-use finalizer", func(ctx context.Context) (bool, string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "protected", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(class.Finalizers, nodesetv1alpha1.FinalizerInUse), fmt.Sprint(class.Finalizers)
	})
	createSet(t, ns, "user", "protected", 1)
	eventually(t, 2*time.Minute, "the set's node", converged(c, t, ns, "user", 1))

	require.NoError(t, cs.NodesetV1alpha1().NodeClasses().Delete(ctx, "protected", metav1.DeleteOptions{}))
	eventuallyEvent(t, "protected", nodesetcontroller.ReasonClassInUse)
	class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "protected", metav1.GetOptions{})
	require.NoError(t, err, "the class in use stays")
	require.NotNil(t, class.DeletionTimestamp)

	require.NoError(t, framework.Scale(ctx, cs, ns, "user", 2))
	eventually(t, 2*time.Minute, "the set of a deleting class still scales", converged(c, t, ns, "user", 2))
	_, err = cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, tenantSet("late", "protected", 1), metav1.CreateOptions{})
	require.Error(t, err, "no new NodeSet for a class being deleted")
	assert.Contains(t, err.Error(), "NodeClassDeleting")

	require.NoError(t, cs.NodesetV1alpha1().NodeSets(ns).Delete(ctx, "user", metav1.DeleteOptions{}))
	eventually(t, 2*time.Minute, "the class goes with its last NodeSet", func(ctx context.Context) (bool, string) {
		_, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "protected", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}
