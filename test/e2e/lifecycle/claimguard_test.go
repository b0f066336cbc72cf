package lifecycle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	nodecontroller "nodeset.dev/nodeset/pkg/controller/node"
	"nodeset.dev/nodeset/test/framework"
)

// TestALoneNodeTheClaimsPolicyDidNotGuardGetsNoMachine runs the node
// controller with its default, --require-node-claims-policy=true, on an API
// server with NodeRestriction and the Node authorizer. Without the
// kubelet-node-claims policy, a kubelet's lone Node request is admitted by
// the API server: the node controller gives it no machine, nor an admin's
// made then. Once the policy is installed, a lone Node made after it gets
// its machine, and those made before still do not.
func TestALoneNodeTheClaimsPolicyDidNotGuardGetsNoMachine(t *testing.T) {
	p := startRestrictedWith(t, 5*time.Minute, framework.ControllerOptions{NodeArgs: []string{"--require-node-claims-policy=true"}}, "guard-team")
	ctx, kube, cs := p.ctx, p.kube, p.cs
	const class = "guard-sim"
	_, err := cs.NodesetV1alpha1().NodeClasses().Create(ctx, &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
			DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}},
			Limits:         &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](2)}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	lone := func(name string) *corev1.Node { return loneRequest(name, class) }
	unserved := func(t *testing.T, name string) {
		t.Helper()
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, n.Spec.ProviderID, "no machine")
		assert.NotContains(t, n.Finalizers, nodesetv1alpha1.FinalizerTermination, "not held")
		assert.Equal(t, nodesetv1alpha1.SealNone, n.Labels[nodesetv1alpha1.LabelSeal], "marked none of nodeset's")
	}
	t.Cleanup(func() {
		for _, name := range []string{"guard-rogue", "guard-admin-early", "guard-admin"} {
			ctx := context.Background()
			_, _ = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		}
	})

	// Without the policy the API server admits a kubelet's request.
	_, err = p.asKubelet("guard-rogue").CoreV1().Nodes().Create(ctx, lone("guard-rogue"), metav1.CreateOptions{})
	require.NoError(t, err, "nothing in the API server refuses it without the policy")
	_, err = kube.CoreV1().Nodes().Create(ctx, lone("guard-admin-early"), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, name := range []string{"guard-rogue", "guard-admin-early"} {
		eventuallyEventOn(t, kube, name, nodecontroller.ReasonUnguardedRequest, "the policy is not installed")
		eventually(t, time.Minute, name+" marked", func(ctx context.Context) (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Labels[nodesetv1alpha1.LabelSeal] == nodesetv1alpha1.SealNone, fmt.Sprint(n.Labels)
		})
		unserved(t, name)
	}
	// Marked none of nodeset's, they take none of the class's room (two
	// Nodes): a NodeSet of it gets its two.
	_, err = cs.NodesetV1alpha1().NodeSets("guard-team").Create(ctx, &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: class, Replicas: ptr.To[int32](2)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sealSettled(t, cs, "guard-team", "web", 2)

	p.applyClaimsPolicy(t, class)
	policy, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, nodecontroller.NodeClaimsPolicy, metav1.GetOptions{})
	require.NoError(t, err)
	binding, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, nodecontroller.NodeClaimsPolicy, metav1.GetOptions{})
	require.NoError(t, err)
	// When both were made or last written, but for their status.
	var installed time.Time
	for _, meta := range []metav1.ObjectMeta{policy.ObjectMeta, binding.ObjectMeta} {
		if meta.CreationTimestamp.After(installed) {
			installed = meta.CreationTimestamp.Time
		}
		for _, f := range meta.ManagedFields {
			if f.Subresource == "" && f.Time != nil && f.Time.After(installed) {
				installed = f.Time.Time
			}
		}
	}
	// A lone Node stamped less than two seconds after the policy may have
	// been made before the API server applied it: wait for the server's
	// clock (a dry run's stamp) to be past that.
	eventually(t, time.Minute, "the API server's clock two seconds past the policy", func(ctx context.Context) (bool, string) {
		probe, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "guard-clock"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return !probe.CreationTimestamp.Time.Before(installed.Add(2 * time.Second)), probe.CreationTimestamp.String()
	})

	_, err = kube.CoreV1().Nodes().Create(ctx, lone("guard-admin"), metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, 2*time.Minute, "guard-admin's machine", func(ctx context.Context) (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(ctx, "guard-admin", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return n.Spec.ProviderID != "", fmt.Sprint(n.Finalizers, n.Spec.ProviderID)
	})
	n, err := kube.CoreV1().Nodes().Get(ctx, "guard-admin", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, n.Finalizers, nodesetv1alpha1.FinalizerTermination, "held for its machine")

	// The Nodes made while the policy was away stay unserved under it:
	// either could be a kubelet's.
	for _, name := range []string{"guard-rogue", "guard-admin-early"} {
		unserved(t, name)
	}
}
