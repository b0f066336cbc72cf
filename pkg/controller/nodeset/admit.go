package nodeset

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/plan"
)

// Admit is the admission-time check of a NodeSet being created (old nil) or
// updated: the same rules the controller reports as Accepted=False, so a
// webhook outage lets nothing through that the controller would act on. It
// returns the reason and message of a refusal, or "" when the NodeSet is
// admitted. A class not yet validated by a node controller, or found invalid,
// is not a reason to refuse: the NodeSet waits in Accepted=False until the
// class is fixed.
func (c *Controller) Admit(set, old *nodesetv1alpha1.NodeSet) (reason, message string) {
	if old != nil && equality.Semantic.DeepEqual(old.Spec, set.Spec) {
		// Metadata only (finalizers, annotations, labels): never refused, or
		// a NodeSet admitted during a webhook outage could not even be deleted.
		return "", ""
	}
	res := c.resolve(set)
	if res.accepted.Reason == ReasonNodeClassNotFound {
		// The class may be newer than the cache (a catalogue and its
		// NodeSets applied together): ask the API server.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if class, err := c.nodesetClient.NodesetV1alpha1().NodeClasses().Get(ctx, set.Spec.NodeClassName, metav1.GetOptions{}); err == nil {
			res = c.resolveWith(set, class)
		}
	}
	if res.accepted.Status != metav1.ConditionTrue {
		switch res.accepted.Reason {
		case ReasonNodeClassNotValidated, ReasonDriverNotServed, ReasonNodeClassInvalid:
		default:
			return res.accepted.Reason, res.accepted.Message
		}
	}
	if res.class == nil {
		return "", ""
	}
	if old == nil && res.class.DeletionTimestamp != nil {
		return ReasonNodeClassDeleting, fmt.Sprintf("NodeClass %q is being deleted: it waits for its NodeSets to go, and takes no new one", res.class.Name)
	}
	return c.admitLimits(res.class, set, old)
}

// AdmitScale is Admit for a change of replicas through the /scale subresource.
func (c *Controller) AdmitScale(namespace, name string, replicas int32) (reason, message string) {
	old, err := c.nodeSetLister.NodeSets(namespace).Get(name)
	if isNotFound(err) {
		// Newer than the cache (kubectl scale right after create): ask
		// the API server, as Admit does for a class.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		old, err = c.nodesetClient.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return "", "" // unknown even to the API server: the controller still checks
	}
	set := old.DeepCopy()
	set.Spec.Replicas = &replicas
	return c.Admit(set, old)
}

// NamespaceCached reports whether the Namespace is in the controller's
// cache: judging a NodeSet of a class that admits namespaces by label reads
// a Namespace it does not hold from the API server.
func (c *Controller) NamespaceCached(name string) bool {
	_, err := c.namespaceLister.Get(name)
	return err == nil
}

// admitLimits refuses a NodeSet whose replicas do not fit its class's
// limits beside everything else of the class (plan.CountUsage, as the
// controller counts before it creates). Only growth is refused: an update
// that keeps or lowers replicas always passes.
func (c *Controller) admitLimits(class *nodesetv1alpha1.NodeClass, set, old *nodesetv1alpha1.NodeSet) (reason, message string) {
	if !plan.Limited(class) {
		return "", ""
	}
	want := plan.Replicas(set)
	if old != nil && want <= plan.Replicas(old) {
		return "", ""
	}
	others, err := c.ClassUsage(class, set.Namespace, set.Namespace+"/"+set.Name)
	if err != nil {
		return "", "" // the controller caps creations in any case
	}
	if refusal := plan.Fits(class, set.Namespace, others, int64(want)); refusal != "" {
		return ReasonLimitExceeded, refusal
	}
	return "", ""
}
