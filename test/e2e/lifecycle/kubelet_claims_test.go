package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// TestTheNodeClaimsPolicyKeepsKubeletsFromClaimingNodes applies the shipped
// ValidatingAdmissionPolicy deploy/admission/kubelet-node-claims.yaml to an
// API server that runs NodeRestriction and the Node authorizer, beside both
// controllers, and tries as kubelets what NodeRestriction lets them do:
// register a lone Node's request for a machine, and put on, change or take
// off nodeset.dev/ labels, annotations and finalizers. Each is refused with
// the rule; what a real kubelet does (register with its status, with
// nodeset.dev labels from --node-labels too, into a Node nodeset made, and
// report on it) is not, nor an admin's lone Node.
func TestTheNodeClaimsPolicyKeepsKubeletsFromClaimingNodes(t *testing.T) {
	p := startRestricted(t, 5*time.Minute, "claims-team")
	ctx, kube, cs := p.ctx, p.kube, p.cs
	const class = "claims-sim"
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.NodesetV1alpha1().NodeSets("claims-team").Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](1)}}, metav1.CreateOptions{})
	require.NoError(t, err)

	lone := func(name string) *corev1.Node { return loneRequest(name, class) }
	withStatus := func(n *corev1.Node) *corev1.Node {
		n.Status = corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.2"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
		return n
	}
	p.applyClaimsPolicy(t, class)
	refused := func(t *testing.T, err error, rule string) {
		t.Helper()
		require.Error(t, err)
		assert.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'kubelet-node-claims.nodeset.dev'")
		assert.Contains(t, err.Error(), rule)
	}
	removeByHand := func(name string) {
		t.Cleanup(func() {
			ctx := context.Background()
			_, _ = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	patchAs := func(node string, patch string, subresources ...string) error {
		_, err := p.asKubelet(node).CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, subresources...)
		return err
	}

	t.Run("a kubelet's lone Node request", func(t *testing.T) {
		_, err := p.asKubelet("claims-lone").CoreV1().Nodes().Create(ctx, lone("claims-lone"), metav1.CreateOptions{})
		refused(t, err, "system:node:claims-lone may not register a Node with label nodeset.dev/nodeclass=claims-sim without its status")
		_, err = kube.CoreV1().Nodes().Get(ctx, "claims-lone", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "nothing stored: %v", err)
	})

	t.Run("an admin's lone Node request", func(t *testing.T) {
		_, err := kube.CoreV1().Nodes().Create(ctx, lone("claims-admin"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.NoError(t, err, "the policy is for kubelets alone")
	})

	t.Run("a kubelet registering with its status and the class label", func(t *testing.T) {
		_, err := p.asKubelet("claims-hosted").CoreV1().Nodes().Create(ctx, withStatus(lone("claims-hosted")), metav1.CreateOptions{})
		require.NoError(t, err, "a kubelet registers with its status, and may carry nodeset.dev labels from --node-labels")
		removeByHand("claims-hosted")
		// With its status taken away it would be a request.
		err = patchAs("claims-hosted", `{"status":{"nodeInfo":{"kubeletVersion":""}}}`, "status")
		refused(t, err, "system:node:claims-hosted may not take status.nodeInfo.kubeletVersion away from a Node with label nodeset.dev/nodeclass=claims-sim")
		err = patchAs("claims-hosted", `{"status":{"nodeInfo":{"kubeletVersion":"v1.36.3"}}}`, "status")
		assert.NoError(t, err, "a kubelet upgraded reports its new version")
	})

	t.Run("a kubelet registering with its system information alone", func(t *testing.T) {
		// What the policy requires of a kubelet's registration with the
		// class label, and nothing more: no condition yet. The controllers
		// hold Nodes without most of their status; what tells a kubelet's
		// Node from an admin's request must survive that.
		n := lone("claims-info")
		n.Status = corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.2"}}
		_, err := p.asKubelet("claims-info").CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
		removeByHand("claims-info")
		eventually(t, time.Minute, "the node controller's verdict on the Node", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, "claims-info", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if len(n.Finalizers) > 0 || n.Spec.ProviderID != "" {
				return true, "taken over"
			}
			events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=claims-info"})
			if err != nil {
				return false, err.Error()
			}
			return slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.Reason == nodecontroller.ReasonForeignNode }), "no event yet"
		})
		got, err := kube.CoreV1().Nodes().Get(ctx, "claims-info", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, got.Spec.ProviderID, "no machine of the class for a kubelet's own Node")
		assert.Empty(t, got.Finalizers, "not held")
	})

	t.Run("a kubelet's own Node, claiming afterwards", func(t *testing.T) {
		_, err := p.asKubelet("claims-plain").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "claims-plain"}}, metav1.CreateOptions{})
		require.NoError(t, err, "a Node with no nodeset.dev keys")
		removeByHand("claims-plain")
		refused(t, patchAs("claims-plain", `{"metadata":{"labels":{"nodeset.dev/nodeclass":"claims-sim"}}}`),
			"system:node:claims-plain may not add, change or remove label nodeset.dev/nodeclass=claims-sim")
		refused(t, patchAs("claims-plain", `{"metadata":{"labels":{"nodeset.dev/nodeclass":"claims-sim"}}}`, "status"),
			"system:node:claims-plain may not add, change or remove label nodeset.dev/nodeclass=claims-sim")
		refused(t, patchAs("claims-plain", `{"metadata":{"labels":{"team.nodeset.dev/x":"y"}}}`),
			"may not add, change or remove label team.nodeset.dev/x=y")
		refused(t, patchAs("claims-plain", `{"metadata":{"finalizers":["nodeset.dev/termination"]}}`),
			"system:node:claims-plain may not add or remove finalizer nodeset.dev/termination")
		refused(t, patchAs("claims-plain", `{"metadata":{"annotations":{"nodeset.dev/skip-drain":"true"}}}`),
			"system:node:claims-plain may not add, change or remove annotation nodeset.dev/skip-drain")
		assert.NoError(t, patchAs("claims-plain", `{"metadata":{"labels":{"example.com/role":"cache"}}}`), "other labels are the kubelet's to set")
		n, err := kube.CoreV1().Nodes().Get(ctx, "claims-plain", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"example.com/role": "cache"}, n.Labels)
		assert.Empty(t, n.Finalizers)
		assert.NotContains(t, n.Annotations, nodesetv1alpha1.AnnotationSkipDrain)
	})

	t.Run("the kubelet of a Node nodeset made", func(t *testing.T) {
		sealSettled(t, cs, "claims-team", "web", 1)
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{
			LabelSelector: nodesetv1alpha1.LabelSeal + "=" + nodeutil.Seal("claims-team", "web", class)})
		require.NoError(t, err)
		require.Len(t, nodes.Items, 1)
		made := nodes.Items[0]
		// Its kubelet registers as a kubelet does: a create with its status
		// and --node-labels, which finds the Node there.
		registration := withStatus(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: made.Name, Labels: map[string]string{
			nodesetv1alpha1.LabelNodeSetNamespace: "claims-team", nodesetv1alpha1.LabelNodeSet: "web", nodesetv1alpha1.LabelNodeClass: class}}})
		_, err = p.asKubelet(made.Name).CoreV1().Nodes().Create(ctx, registration, metav1.CreateOptions{})
		assert.True(t, apierrors.IsAlreadyExists(err), "the kubelet goes on to patch the Node nodeset made: %v", err)
		now := metav1.Now().UTC().Format(time.RFC3339)
		assert.NoError(t, patchAs(made.Name, fmt.Sprintf(`{"status":{"nodeInfo":{"kubeletVersion":"v1.36.2"},"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now), "status"),
			"a kubelet reports on its Node")
		refused(t, patchAs(made.Name, `{"metadata":{"labels":{"nodeset.dev/nodeset":"other"}}}`),
			fmt.Sprintf("system:node:%s may not add, change or remove label nodeset.dev/nodeset=", made.Name))
		refused(t, patchAs(made.Name, `{"metadata":{"labels":{"nodeset.dev/nodeclass":null}}}`, "status"),
			"may not add, change or remove label nodeset.dev/nodeclass=claims-sim")
		refused(t, patchAs(made.Name, `{"metadata":{"finalizers":null}}`),
			"may not add or remove finalizer nodeset.dev/termination")
		n, err := kube.CoreV1().Nodes().Get(ctx, made.Name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "web", n.Labels[nodesetv1alpha1.LabelNodeSet])
		assert.Equal(t, class, n.Labels[nodesetv1alpha1.LabelNodeClass])
		assert.Contains(t, n.Finalizers, nodesetv1alpha1.FinalizerTermination)
	})
}
