package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestAKubeletCannotForgeTheRestrictedTenantLabel runs both controllers
// against an API server with the NodeRestriction admission plugin and the
// Node authorizer, as production clusters run. A Dedicated NodeSet's Node
// carries node-restriction.kubernetes.io/nodeset-tenant=<namespace>. The
// kubelet of a Shared Node (whose credentials root on that Node gives a
// tenant) can relabel its Node nodeset.dev/tenant=<victim>, which is why
// tenants' pods must select the restricted label instead: that one the
// kubelet can neither add, change nor remove, nor register a Node with.
func TestAKubeletCannotForgeTheRestrictedTenantLabel(t *testing.T) {
	p := startRestricted(t, 8*time.Minute, "victim", "attacker")
	ctx, kube, cs := p.ctx, p.kube, p.cs
	for name, tenancy := range map[string]nodesetv1alpha1.Tenancy{"dedicated": nodesetv1alpha1.TenancyDedicated, "shared": nodesetv1alpha1.TenancyShared} {
		_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated, Tenancy: tenancy,
				DriverSections:      nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
				RegistrationTimeout: &metav1.Duration{Duration: time.Minute}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for ns, class := range map[string]string{"victim": "dedicated", "attacker": "shared"} {
		_, err := cs.NodesetV1alpha1().NodeSets(ns).Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	nodeOf := func(ns string) *corev1.Node {
		t.Helper()
		var found *corev1.Node
		eventually(t, 2*time.Minute, "a Ready Node of "+ns+"/web", func(ctx context.Context) (bool, string) {
			nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelNodeSetNamespace + "=" + ns})
			if err != nil {
				return false, err.Error()
			}
			for i := range nodes.Items {
				for _, cond := range nodes.Items[i].Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						found = &nodes.Items[i]
						return true, ""
					}
				}
			}
			return false, "no Ready Node yet"
		})
		return found
	}
	victims, attackers := nodeOf("victim"), nodeOf("attacker")
	assert.Equal(t, "victim", victims.Labels[nodesetv1alpha1.LabelTenantRestricted], "nodeset put it on the Dedicated Node")
	assert.Equal(t, "victim", victims.Labels[nodesetv1alpha1.LabelTenant])
	assert.NotContains(t, attackers.Labels, nodesetv1alpha1.LabelTenantRestricted)

	// The kubelet's own credentials: user system:node:<name> in group system:nodes.
	asKubelet := p.asKubelet
	relabel := func(node string, labels map[string]any) error { return p.relabel(t, node, labels) }
	attacker := attackers.Name
	assert.NoError(t, relabel(attacker, map[string]any{nodesetv1alpha1.LabelTenant: "victim"}),
		"a kubelet may relabel its Node nodeset.dev/tenant: the weaker label, kept for compatibility")
	err := relabel(attacker, map[string]any{nodesetv1alpha1.LabelTenantRestricted: "victim"})
	assert.True(t, apierrors.IsForbidden(err), "a kubelet adds no restricted label: %v", err)
	err = relabel(victims.Name, map[string]any{nodesetv1alpha1.LabelTenantRestricted: "attacker"})
	assert.True(t, apierrors.IsForbidden(err), "nor changes one: %v", err)
	err = relabel(victims.Name, map[string]any{nodesetv1alpha1.LabelTenantRestricted: nil})
	assert.True(t, apierrors.IsForbidden(err), "nor removes one: %v", err)
	_, err = asKubelet("forged").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "forged",
		Labels: map[string]string{nodesetv1alpha1.LabelTenantRestricted: "victim"}}}, metav1.CreateOptions{})
	assert.True(t, apierrors.IsForbidden(err), "nor registers a Node with one: %v", err)

	// What the victim's pods select matches only the victim's Node.
	selected, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodesetv1alpha1.LabelTenantRestricted + "=victim"})
	require.NoError(t, err)
	var names []string
	for _, n := range selected.Items {
		names = append(names, n.Name)
	}
	assert.Equal(t, []string{victims.Name}, names)
	// The Dedicated Node stays Ready: its simulated kubelet's writes go on
	// beside the restricted label.
	current, err := kube.CoreV1().Nodes().Get(ctx, victims.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "victim", current.Labels[nodesetv1alpha1.LabelTenantRestricted])
}
