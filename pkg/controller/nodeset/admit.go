package nodeset

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
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
		case ReasonDriverNotServed, ReasonNodeClassInvalid:
		default:
			return res.accepted.Reason, res.accepted.Message
		}
	}
	if res.class == nil {
		return "", ""
	}
	return c.admitLimits(res.class, set, old)
}

// AdmitScale is Admit for a change of replicas through the /scale subresource.
func (c *Controller) AdmitScale(namespace, name string, replicas int32) (reason, message string) {
	old, err := c.nodeSetLister.NodeSets(namespace).Get(name)
	if err != nil {
		return "", "" // unknown to the cache yet: the controller still checks
	}
	set := old.DeepCopy()
	set.Spec.Replicas = &replicas
	return c.Admit(set, old)
}

// admitLimits refuses a NodeSet whose replicas, added to those of the other
// NodeSets of its class, would exceed the class's limits. Only growth is
// refused: an update that keeps or lowers replicas always passes.
func (c *Controller) admitLimits(class *nodesetv1alpha1.NodeClass, set, old *nodesetv1alpha1.NodeSet) (reason, message string) {
	limits := class.Spec.Limits
	if limits == nil || (limits.MaxNodes == nil && limits.MaxNodesPerNamespace == nil) {
		return "", ""
	}
	want := ptrValue(set.Spec.Replicas)
	if old != nil && want <= ptrValue(old.Spec.Replicas) {
		return "", ""
	}
	sets, err := c.nodeSetLister.List(everything)
	if err != nil {
		return "", "" // the controller caps creations in any case
	}
	var inClass, inNamespace int32
	for _, other := range sets {
		if other.Spec.NodeClassName != class.Name || (other.Namespace == set.Namespace && other.Name == set.Name) || other.DeletionTimestamp != nil {
			continue
		}
		inClass += ptrValue(other.Spec.Replicas)
		if other.Namespace == set.Namespace {
			inNamespace += ptrValue(other.Spec.Replicas)
		}
	}
	if l := limits.MaxNodesPerNamespace; l != nil && inNamespace+want > *l {
		return ReasonLimitExceeded, fmt.Sprintf(
			"spec.replicas: %d nodes would exceed NodeClass %q's spec.limits.maxNodesPerNamespace of %d: the other NodeSets of namespace %q already ask for %d",
			want, class.Name, *l, set.Namespace, inNamespace)
	}
	if l := limits.MaxNodes; l != nil && inClass+want > *l {
		return ReasonLimitExceeded, fmt.Sprintf(
			"spec.replicas: %d nodes would exceed NodeClass %q's spec.limits.maxNodes of %d: its other NodeSets already ask for %d",
			want, class.Name, *l, inClass)
	}
	return "", ""
}
