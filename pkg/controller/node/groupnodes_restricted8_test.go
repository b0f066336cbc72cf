package node

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// dedicated makes the group fixture's class Dedicated.
func (g *groupFixture) dedicated() {
	class := asgTestClass()
	class.Spec.Tenancy = nodesetv1alpha1.TenancyDedicated
	require.NoError(g.t, g.classIndexer.Update(class))
}

// TestDedicatedGroupNodesCarryTheRestrictedTenantLabel: a Dedicated class's
// group machine gets the tenant label no kubelet can set, on the Node
// nodeset makes and on the Node a kubelet registered first and nodeset
// adopts (which the kubelet could not have registered with it).
func TestDedicatedGroupNodesCarryTheRestrictedTenantLabel(t *testing.T) {
	kubelets := markReady(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-101", Labels: map[string]string{corev1.LabelHostname: "ip-101"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///zone-a/i-101"}})
	g := newGroupFixture(t, 2, kubelets)
	g.dedicated()
	require.NoError(t, g.syncGroup())
	for _, name := range []string{"ip-100", "ip-101"} {
		node := g.get(name)
		assert.Equal(t, "team-a", node.Labels[nodesetv1alpha1.LabelTenantRestricted], name)
		assert.Equal(t, "team-a", node.Labels[nodesetv1alpha1.LabelTenant], name)
		assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: nodesetv1alpha1.LabelTenant, Value: "team-a", Effect: corev1.TaintEffectNoSchedule}, name)
	}
}

// TestGroupDriverCannotStampTheRestrictedTenantLabel: like nodeset.dev
// keys, the restricted tenant label is nodeset's word alone: a Shared
// class's Node gets none from what its group driver reports (a label left
// on a cloud group by the class's Dedicated past, or a plugin's), and a
// Dedicated one keeps its own namespace's.
func TestGroupDriverCannotStampTheRestrictedTenantLabel(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dedicated bool
		want      string
	}{
		{"Shared", false, ""},
		{"Dedicated", true, "team-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGroupFixture(t, 1)
			if tc.dedicated {
				g.dedicated()
			}
			g.group.machineLabels = map[string]string{nodesetv1alpha1.LabelTenantRestricted: "team-b", corev1.LabelTopologyZone: "zone-a"}
			require.NoError(t, g.syncGroup())
			made := g.get("ip-100")
			assert.Equal(t, "zone-a", made.Labels[corev1.LabelTopologyZone])
			got, ok := made.Labels[nodesetv1alpha1.LabelTenantRestricted]
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestAKubeletOfAnotherNameCannotClaimADedicatedMachine: any kubelet may
// register its own Node with the providerID of its choosing. A Node that
// claims a Dedicated group machine's providerID under another name than
// the machine's is another kubelet's (one of a Shared node, say, whose
// credentials its tenant holds): adopting it would give it the victim's
// tenant labels, restricted one included, and tolerate the victim's pods
// onto a host the attacker controls. It is left alone and reported.
func TestAKubeletOfAnotherNameCannotClaimADedicatedMachine(t *testing.T) {
	impostor := markReady(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "shared-7", Labels: map[string]string{corev1.LabelHostname: "shared-7"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///zone-a/i-100"}})
	g := newGroupFixture(t, 1, impostor)
	g.dedicated()
	require.NoError(t, g.syncGroup())
	node := g.get("shared-7")
	assert.NotContains(t, node.Labels, nodesetv1alpha1.LabelTenantRestricted)
	assert.NotContains(t, node.Labels, nodesetv1alpha1.LabelTenant)
	assert.NotContains(t, node.Labels, nodesetv1alpha1.LabelNodeSet)
	assert.NotContains(t, node.Finalizers, nodesetv1alpha1.FinalizerTermination)
	for _, taint := range node.Spec.Taints {
		assert.NotEqual(t, nodesetv1alpha1.LabelTenant, taint.Key, "not tolerated for the victim's pods")
	}
	found := false
	for len(g.recorder.Events) > 0 {
		if e := <-g.recorder.Events; assert.NotEmpty(t, e) && strings.Contains(e, ReasonNodeConflict) && strings.Contains(e, "aws:///zone-a/i-100") {
			found = true
		}
	}
	assert.True(t, found, "reported")
	nodes, err := g.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Len(t, nodes.Items, 1, "no second Node with the machine's providerID")
}
