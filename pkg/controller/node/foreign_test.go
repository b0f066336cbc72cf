package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestAGroupNodeNotHeldIsNeitherDeletedNorReplaced: a kubelet's Node of
// another machine, NotReady, labelled by hand with the set's labels, is
// not deleted when the group does not have its machine, nor replaced as
// unhealthy; the set's own Node whose finalizer was taken off is held
// again.
func TestAGroupNodeNotHeldIsNeitherDeletedNorReplaced(t *testing.T) {
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", UID: "uid-elsewhere",
		CreationTimestamp: metav1.NewTime(testNow.Add(-time.Hour)),
		Labels: map[string]string{nodesetv1alpha1.LabelNodeClass: "asg", nodesetv1alpha1.LabelNodeSetNamespace: "team-a",
			nodesetv1alpha1.LabelNodeSet: "web"}},
		Spec: corev1.NodeSpec{ProviderID: "aws:///zone-b/i-elsewhere"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(testNow.AddDate(0, 0, -1))}}}}
	g := newGroupFixture(t, 2, foreign)
	g.controller.opts.Remediation = RemediationOptions{UnhealthyTimeout: 1, MaxUnhealthyPercent: 100}
	require.NoError(t, g.syncGroup())
	require.NoError(t, g.sync("elsewhere"))
	n := g.get("elsewhere")
	assert.Nil(t, n.DeletionTimestamp, "not deleted")
	assert.Empty(t, n.Finalizers, "not held")
	assert.Empty(t, g.group.terminated)
	assert.Contains(t, g.events(), "Warning "+ReasonForeignNode+" Carries the labels of NodeSet team-a/web, but its machine aws:///zone-b/i-elsewhere is not in cloud group "+
		g.group.ensured[0].Name+" and nodeset did not make it: left alone")

	own := g.get("ip-100")
	require.True(t, nodeutil.HasStartupTaint(own))
	own.Finalizers = nil
	_, err := g.kube.CoreV1().Nodes().Update(context.Background(), own, metav1.UpdateOptions{})
	require.NoError(t, err)
	g.updateCache(g.get("ip-100"))
	require.NoError(t, g.syncGroup())
	assert.Contains(t, g.get("ip-100").Finalizers, nodesetv1alpha1.FinalizerTermination, "held again")
}

// TestALoneNodeNoKubeletReportedOnIsProvisioned: kube-controller-manager
// gives a Node no kubelet ever posted a status for a Ready condition of its
// own (Unknown, NodeStatusNeverUpdated); such a Node, created by an admin,
// is still one to make a machine for. One whose kubelet reports NotReady
// is not.
func TestALoneNodeNoKubeletReportedOnIsProvisioned(t *testing.T) {
	for _, tt := range []struct {
		name      string
		condition corev1.NodeCondition
		info      corev1.NodeSystemInfo
		made      bool
	}{
		{"never posted", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusNeverUpdated"}, corev1.NodeSystemInfo{}, true},
		{"kubelet NotReady", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady"}, corev1.NodeSystemInfo{}, false},
		{"kubelet stopped posting", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}, corev1.NodeSystemInfo{}, false},
		{"node info only", corev1.NodeCondition{}, corev1.NodeSystemInfo{KubeletVersion: "v1.34.0"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node := loneNode("static-a", "sim", nil)
			if tt.condition.Type != "" {
				node.Status.Conditions = []corev1.NodeCondition{tt.condition}
			}
			node.Status.NodeInfo = tt.info
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, node)
			require.NoError(t, f.sync("static-a"))
			got := f.get("static-a")
			if tt.made {
				assert.Equal(t, "test:///static-a", got.Spec.ProviderID)
				assert.Equal(t, 1, f.driver.creates)
				return
			}
			assert.Empty(t, got.Spec.ProviderID)
			assert.Empty(t, got.Finalizers)
			assert.False(t, nodeutil.HasStartupTaint(got))
			assert.Zero(t, f.driver.creates)
		})
	}
}

// TestANodeClaimingASetGetsNoMachineUnlessTheSetMadeIt: the nodeset
// controller makes a set's Nodes itself, held and sealed. A Node with a
// set's labels and no host, made by anyone else who may create a Node (a
// kubelet's credentials for a name of its choosing included), is not a
// lone Node's request: no machine is made on the set's account, and it is
// not held. The same Node with only its class label is one.
func TestANodeClaimingASetGetsNoMachineUnlessTheSetMadeIt(t *testing.T) {
	claims := loneNode("claims-web", "sim", nil)
	claims.Labels[nodesetv1alpha1.LabelNodeSetNamespace] = "team-a"
	claims.Labels[nodesetv1alpha1.LabelNodeSet] = "web"
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, claims, loneNode("lone", "sim", nil))
	require.NoError(t, f.sync("claims-web"))
	got := f.get("claims-web")
	assert.Empty(t, got.Spec.ProviderID)
	assert.Empty(t, got.Finalizers, "not held")
	assert.Zero(t, f.driver.creates, "no machine")
	assert.Equal(t, []string{"Warning " + ReasonForeignNode + " Not provisioned: it claims NodeSet team-a/web, whose Nodes the nodeset controller makes itself; " +
		"remove the nodeset.dev/nodeset-namespace and nodeset.dev/nodeset labels to ask for a machine of NodeClass sim"}, f.events())

	require.NoError(t, f.sync("lone"))
	assert.Equal(t, "test:///lone", f.get("lone").Spec.ProviderID, "a lone Node of the class is still provisioned")
}
