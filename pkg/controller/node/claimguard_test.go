package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// madeAt is node made at made.
func madeAt(node *corev1.Node, made time.Time) *corev1.Node {
	node.CreationTimestamp = metav1.NewTime(made)
	return node
}

// claimsGuard is the kubelet-node-claims policy and its binding as
// deploy/admission ships them, made at made.
func claimsGuard(made time.Time) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	meta := metav1.ObjectMeta{Name: NodeClaimsPolicy, CreationTimestamp: metav1.NewTime(made)}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: meta,
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: ptr.To(admissionregistrationv1.Fail)}},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: meta,
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: NodeClaimsPolicy,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
}

func TestALoneNodeIsServedOnlyUnderTheClaimsPolicy(t *testing.T) {
	installed := testNow.Add(-time.Hour)
	for _, tc := range []struct {
		name string
		// guard changes the shipped policy and binding; nil leaves them out.
		guard func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object
		made  time.Time
		why   string // "" when served
	}{
		{name: "made after the policy", made: installed.Add(2 * time.Second)},
		{name: "no policy", why: "the policy is not installed", made: installed.Add(time.Minute),
			guard: func(*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				return nil
			}},
		{name: "no binding", why: "its binding is not installed", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, _ *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				return []runtime.Object{p}
			}},
		{name: "made before the policy", why: "not after the policy and its binding were", made: installed.Add(-time.Minute)},
		{name: "made in the same second", why: "not after the policy and its binding were", made: installed.Add(time.Second)},
		{name: "binding made later", why: "not after the policy and its binding were", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				b.CreationTimestamp = metav1.NewTime(installed.Add(2 * time.Minute))
				return []runtime.Object{p, b}
			}},
		{name: "binding edited into force later", why: "not after the policy and its binding were made or last changed", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				// Warn made Deny two minutes on: the Node came under Warn.
				edited := metav1.NewTime(installed.Add(2 * time.Minute))
				b.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, Time: &edited}}
				return []runtime.Object{p, b}
			}},
		{name: "a status written later", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				// The API server's type checking, not an edit of the rules.
				checked := metav1.NewTime(installed.Add(2 * time.Minute))
				p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-apiserver", Operation: metav1.ManagedFieldsOperationUpdate,
					Time: &checked, Subresource: "status"}}
				return []runtime.Object{p, b}
			}},
		{name: "failurePolicy Ignore", why: "the policy's failurePolicy is Ignore, not Fail", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				p.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				return []runtime.Object{p, b}
			}},
		{name: "failurePolicy left out (Fail)", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				p.Spec.FailurePolicy = nil
				return []runtime.Object{p, b}
			}},
		{name: "binding that only warns", why: "its binding's validationActions do not include Deny", made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn, admissionregistrationv1.Audit}
				return []runtime.Object{p, b}
			}},
		{name: "binding of another policy", why: `its binding binds policy "allow-all"`, made: installed.Add(time.Minute),
			guard: func(p *admissionregistrationv1.ValidatingAdmissionPolicy, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) []runtime.Object {
				b.Spec.PolicyName = "allow-all"
				return []runtime.Object{p, b}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, binding := claimsGuard(installed)
			objects := []runtime.Object{policy, binding}
			if tc.guard != nil {
				objects = tc.guard(policy, binding)
			}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, append(objects, madeAt(loneNode("static-a", "sim", nil), tc.made))...)
			f.controller.opts.RequireNodeClaimsPolicy = true
			require.NoError(t, f.sync("static-a"))
			got := f.get("static-a")
			if tc.why == "" {
				assert.Equal(t, "test:///static-a", got.Spec.ProviderID)
				assert.Contains(t, got.Finalizers, nodesetv1alpha1.FinalizerTermination)
				return
			}
			assert.Empty(t, got.Spec.ProviderID, "no machine")
			assert.Empty(t, got.Finalizers, "not held")
			assert.Equal(t, nodesetv1alpha1.SealNone, got.Labels[nodesetv1alpha1.LabelSeal], "marked none of nodeset's")
			assert.Zero(t, f.driver.creates)
			events := f.events()
			require.Len(t, events, 1)
			assert.True(t, strings.HasPrefix(events[0], "Warning "+ReasonUnguardedRequest+" "), events[0])
			assert.Contains(t, events[0], tc.why)
			assert.Contains(t, events[0], "--require-node-claims-policy=false")
			assert.Contains(t, events[0], "It is marked node-restriction.kubernetes.io/nodeset-owner=none")

			// Marked, it is never served, whatever comes.
			f.controller.opts.RequireNodeClaimsPolicy = false
			require.NoError(t, f.sync("static-a"))
			assert.Empty(t, f.get("static-a").Spec.ProviderID)
			assert.Zero(t, f.driver.creates)
			assert.Empty(t, f.events())
		})
	}
}

func TestTheClaimsPolicyIsNotReadForANodeSetsNode(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, setNode("web-a", "sim"))
	f.controller.opts.RequireNodeClaimsPolicy = true
	require.NoError(t, f.sync("web-a"))
	assert.Equal(t, "test:///web-a", f.get("web-a").Spec.ProviderID, "a NodeSet's Node is the nodeset controller's own")
	for _, a := range f.kube.Actions() {
		assert.NotEqual(t, "admissionregistration.k8s.io", a.GetResource().Group, "%s %s", a.GetVerb(), a.GetResource())
	}
}

func TestALoneNodeIsServedWithoutThePolicyWhenNotRequired(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, loneNode("static-a", "sim", nil))
	require.NoError(t, f.sync("static-a"))
	assert.Equal(t, "test:///static-a", f.get("static-a").Spec.ProviderID)
}

func TestAnUnreadableClaimsPolicyIsLookedAtAgain(t *testing.T) {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, loneNode("static-a", "sim", nil))
	f.controller.opts.RequireNodeClaimsPolicy = true
	clock := testingclock.NewFakeClock(testNow)
	f.controller.queue.ShutDown()
	f.controller.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Clock: clock})
	t.Cleanup(f.controller.queue.ShutDown)
	f.kube.PrependReactor("get", "validatingadmissionpolicies", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"},
			NodeClaimsPolicy, fmt.Errorf("RBAC: not allowed"))
	})
	require.NoError(t, f.sync("static-a"))
	assert.Empty(t, f.get("static-a").Finalizers)
	assert.NotContains(t, f.get("static-a").Labels, nodesetv1alpha1.LabelSeal, "not marked: served once the policy can be read")
	events := f.events()
	require.Len(t, events, 1)
	assert.Contains(t, events[0], "the node controller may not read the policy or its binding")
	assert.Contains(t, events[0], "Looked at again in 1m0s")
	assert.Zero(t, f.controller.queue.Len())
	clock.Step(claimGuardRetry)
	assert.Eventually(t, func() bool { return f.controller.queue.Len() == 1 }, time.Minute, 10*time.Millisecond,
		"looked at again in a minute")

	f.kube.PrependReactor("get", "validatingadmissionpolicies", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	err := f.sync("static-a")
	require.Error(t, err, "any other failure is retried with backoff")
	assert.Contains(t, err.Error(), "cannot read ValidatingAdmissionPolicy "+NodeClaimsPolicy)
}

// TestAHeldUnsealedLoneNodeIsServedOnlyUnderTheClaimsPolicy: a lone Node
// made with nodeset's finalizer already on (which nodeset never does: it
// seals a lone Node in the write that holds it) is checked as one without.
// Until its class's sealedSince, such a Node is no stranger, so without
// the check a kubelet could have had a machine made by making its request
// held.
func TestAHeldUnsealedLoneNodeIsServedOnlyUnderTheClaimsPolicy(t *testing.T) {
	installed := testNow.Add(-time.Hour)
	for _, tc := range []struct {
		name   string
		policy bool
		served bool
	}{
		{name: "no policy"},
		{name: "made after the policy", policy: true, served: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := madeAt(loneNode("static-a", "sim", nil), installed.Add(time.Minute))
			node.Finalizers = []string{nodesetv1alpha1.FinalizerTermination}
			objects := []runtime.Object{node}
			if tc.policy {
				policy, binding := claimsGuard(installed)
				objects = append(objects, policy, binding)
			}
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{testClass("sim")}, objects...)
			f.controller.opts.RequireNodeClaimsPolicy = true
			require.NoError(t, f.sync("static-a"))
			if tc.served {
				assert.Equal(t, "test:///static-a", f.get("static-a").Spec.ProviderID)
				return
			}
			assert.Empty(t, f.get("static-a").Spec.ProviderID, "no machine")
			assert.Equal(t, nodesetv1alpha1.SealNone, f.get("static-a").Labels[nodesetv1alpha1.LabelSeal])
			assert.Zero(t, f.driver.creates)
			events := f.events()
			require.Len(t, events, 1)
			assert.Contains(t, events[0], "Warning "+ReasonUnguardedRequest+" ")
			assert.Contains(t, events[0], "the policy is not installed")
		})
	}
}
