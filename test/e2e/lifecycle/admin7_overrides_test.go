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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAdmin7AnOverrideTakenBackHoldsTheSet: a NodeSet overrides
// instanceType, which its class lists in tenantOverrides. The admin takes
// the entry out of the list: the set is refused (OverrideNotAllowed) at
// once, keeps the Nodes it has, and a scale-up makes no Node, neither with
// the class's instance type nor with the stale override. Put back, the
// entry lets the set grow with its own instance type, the Nodes it had
// staying (their template is unchanged).
func TestAdmin7AnOverrideTakenBackHoldsTheSet(t *testing.T) {
	c := startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	ns := createNamespace(t, "admin7-overrides")
	createClass(t, "admin7-overrides", func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.TenantOverrides = []string{"instanceType"}
	})
	waitClassValid(t, "admin7-overrides")
	_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "admin7-overrides", Replicas: ptr.To[int32](2),
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.large"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "two Nodes", converged(c, t, ns, "web", 2))
	before, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	hash := before[0].Labels[nodesetv1alpha1.LabelTemplateHash]

	editClass := func(overrides []string) {
		class, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-overrides", metav1.GetOptions{})
		require.NoError(t, err)
		class.Spec.TenantOverrides = overrides
		_, err = cs.NodesetV1alpha1().NodeClasses().Update(ctx, class, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	editClass(nil)
	accepted := func(reason string) func(ctx context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			set, err := cs.NodesetV1alpha1().NodeSets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cond := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
			if cond == nil || cond.ObservedGeneration != set.Generation {
				return false, fmt.Sprintf("Accepted: %+v", cond)
			}
			return cond.Reason == reason, cond.Reason + ": " + cond.Message
		}
	}
	eventually(t, time.Minute, "the set refused", accepted("OverrideNotAllowed"))

	// The webhook holds a scale-up of the set too; without it, the
	// controller does.
	withoutWebhook(t)
	scale(t, ns, "web", 3)
	eventually(t, time.Minute, "the scale-up judged", accepted("OverrideNotAllowed"))
	nodes, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	require.Len(t, nodes, 2, "no Node for a refused set")
	for _, n := range nodes {
		assert.Nil(t, n.DeletionTimestamp, "%s kept", n.Name)
	}

	editClass([]string{"instanceType"})
	eventually(t, 2*time.Minute, "three Nodes once the entry is back", converged(c, t, ns, "web", 3))
	after, err := setNodes(ctx, t, ns, "web")
	require.NoError(t, err)
	for _, n := range after {
		assert.Equal(t, hash, n.Labels[nodesetv1alpha1.LabelTemplateHash], "%s: the set's own template", n.Name)
		assert.Equal(t, "sim.large", n.Labels[corev1.LabelInstanceTypeStable], "%s: the set's own instance type", n.Name)
	}
	kept := 0
	for _, b := range before {
		for _, a := range after {
			if a.Name == b.Name {
				kept++
			}
		}
	}
	assert.Equal(t, 2, kept, "the Nodes it had stay")
}

// TestAdmin7AClassThatCanServeNoNodeSetSaysSo: a class whose own
// annotations leave no room for a Node's is refused by the webhook, and,
// written while the webhook is away, is Valid=False naming the field: not
// admitted and Valid while every NodeSet of it is told its own template is
// at fault.
func TestAdmin7AClassThatCanServeNoNodeSetSaysSo(t *testing.T) {
	startControllers(t)
	ctx := context.Background()
	_, cs := clients(t)
	heavy := func(class *nodesetv1alpha1.NodeClass) {
		class.Spec.NodeTemplate.Annotations = map[string]string{"example.com/manifest": strings.Repeat("m", 240000)}
	}
	class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "admin7-heavy"}, Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverSimulated, DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}}}
	heavy(class)
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, class, metav1.CreateOptions{})
	require.Error(t, err, "refused by the webhook")
	assert.Contains(t, err.Error(), "spec.nodeTemplate.annotations")

	withoutWebhook(t)
	createClass(t, "admin7-heavy", heavy)
	eventually(t, time.Minute, "the class Valid=False, naming the field", func(ctx context.Context) (bool, string) {
		got, err := cs.NodesetV1alpha1().NodeClasses().Get(ctx, "admin7-heavy", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		valid := meta.FindStatusCondition(got.Status.Conditions, nodesetv1alpha1.NodeClassValid)
		return valid != nil && valid.Status == metav1.ConditionFalse && strings.Contains(valid.Message, "spec.nodeTemplate.annotations"),
			fmt.Sprintf("Valid: %+v", valid)
	})
}
