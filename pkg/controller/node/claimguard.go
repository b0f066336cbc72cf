package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// NodeClaimsPolicy names the ValidatingAdmissionPolicy, and its binding,
// that keeps kubelets from asking for machines (deploy/admission): it
// refuses a system:node:* user a Node with a nodeset.dev label and no
// status of its own, which is what a lone Node's request is.
const NodeClaimsPolicy = "kubelet-node-claims.nodeset.dev"

// ReasonUnguardedRequest: a lone Node gets no machine, since the policy
// that keeps kubelets from making such requests did not guard its creation.
const ReasonUnguardedRequest = "UnguardedRequest"

// claimGuardSettle is how much later than the policy and its binding a
// lone Node must be made for its request to count as guarded. The API
// server applies a policy once its informer has loaded and compiled it,
// and timestamps are whole seconds: two seconds apart on the stamps are at
// least one apart in time.
const claimGuardSettle = 2 * time.Second

// claimGuardRetry is how soon a lone Node whose guard could not be read
// (the node controller may not read policies yet) is looked at again.
const claimGuardRetry = time.Minute

// claimGuarded reports whether a lone Node's request for a machine is
// one no kubelet can have made: Options.RequireNodeClaimsPolicy is off,
// or the Node was made after NodeClaimsPolicy and its binding were in
// force (failurePolicy Fail, validationActions with Deny). Nothing on the
// Node says whether an admin or a kubelet made it, but a kubelet could
// not have made it under the policy; one made before the policy, or while
// it was away, could be a kubelet's, and is never served: it is told on
// the Node (ReasonUnguardedRequest) and marked none of nodeset's. One whose
// guard cannot be read is looked at again in claimGuardRetry.
func (c *Controller) claimGuarded(ctx context.Context, node *corev1.Node) (bool, error) {
	if !c.opts.RequireNodeClaimsPolicy {
		return true, nil
	}
	since, why, err := c.claimGuardSince(ctx)
	if err != nil {
		return false, err
	}
	if why == "" && node.CreationTimestamp.Time.Before(since.Add(claimGuardSettle)) {
		why = fmt.Sprintf("the Node was made at %s, not after the policy and its binding were made or last changed (%s)",
			node.CreationTimestamp.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
	}
	if why == "" {
		return true, nil
	}
	rule := fmt.Sprintf("a lone Node gets a machine only if it was made after ValidatingAdmissionPolicy %s and its binding (Deny) were installed, since without them any kubelet could have made it; %s",
		NodeClaimsPolicy, why)
	if why == claimGuardUnreadable {
		c.queue.AddAfter(node.Name, claimGuardRetry)
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonUnguardedRequest, "Not provisioned yet: %s. Looked at again in %s", rule, claimGuardRetry)
		return false, nil
	}
	// Its creation can never have been guarded: marked none of nodeset's,
	// as a Node a kubelet made held is (markStranger), it counts toward no
	// class limit and is never looked at again.
	c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonUnguardedRequest,
		"Not provisioned: %s. It is marked %s=%s: it belongs to no class, counts toward no limit and gets no machine. "+
			"Install deploy/admission (the chart's admissionPolicy) and create the Node again, or run the node controller with --require-node-claims-policy=false",
		rule, nodesetv1alpha1.LabelSeal, nodesetv1alpha1.SealNone)
	return false, c.markNone(ctx, node)
}

// claimGuardUnreadable is claimGuardSince's reason when the node
// controller may not read the policy or its binding.
const claimGuardUnreadable = "the node controller may not read the policy or its binding (RBAC: get validatingadmissionpolicies and validatingadmissionpolicybindings)"

// claimGuardSince is since when NodeClaimsPolicy and its binding have
// both been as they are (lastChanged), or why they do not guard a Node's
// creation now ("" when they do).
func (c *Controller) claimGuardSince(ctx context.Context) (time.Time, string, error) {
	admission := c.kube.AdmissionregistrationV1()
	policy, err := admission.ValidatingAdmissionPolicies().Get(ctx, NodeClaimsPolicy, metav1.GetOptions{})
	if why, err := claimGuardMissing(err, "the policy"); why != "" || err != nil {
		return time.Time{}, why, err
	}
	binding, err := admission.ValidatingAdmissionPolicyBindings().Get(ctx, NodeClaimsPolicy, metav1.GetOptions{})
	if why, err := claimGuardMissing(err, "its binding"); why != "" || err != nil {
		return time.Time{}, why, err
	}
	switch {
	case policy.DeletionTimestamp != nil || binding.DeletionTimestamp != nil:
		return time.Time{}, "the policy or its binding is being deleted", nil
	case policy.Spec.FailurePolicy != nil && *policy.Spec.FailurePolicy != admissionregistrationv1.Fail:
		return time.Time{}, fmt.Sprintf("the policy's failurePolicy is %s, not Fail", *policy.Spec.FailurePolicy), nil
	case binding.Spec.PolicyName != NodeClaimsPolicy:
		return time.Time{}, fmt.Sprintf("its binding binds policy %q", binding.Spec.PolicyName), nil
	case !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return time.Time{}, "its binding's validationActions do not include Deny", nil
	}
	since := lastChanged(policy.ObjectMeta)
	if b := lastChanged(binding.ObjectMeta); b.After(since) {
		since = b
	}
	return since, "", nil
}

// lastChanged is when an object was made or last written, but for its
// status: the latest time among its creation and its managed fields'
// writes. A policy edited into force (failurePolicy made Fail, Warn made
// Deny, its rules changed) guards only the Nodes made after the edit.
func lastChanged(meta metav1.ObjectMeta) time.Time {
	last := meta.CreationTimestamp.Time
	for _, f := range meta.ManagedFields {
		if f.Subresource == "" && f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	return last
}

// claimGuardMissing turns the error of reading the policy or its binding
// (what) into a reason it does not guard, or an error to retry.
func claimGuardMissing(err error, what string) (string, error) {
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsNotFound(err):
		return what + " is not installed", nil
	case apierrors.IsForbidden(err):
		return claimGuardUnreadable, nil
	}
	return "", fmt.Errorf("cannot read ValidatingAdmissionPolicy %s or its binding: %w", NodeClaimsPolicy, err)
}
