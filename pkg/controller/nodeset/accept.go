package nodeset

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/resolve"
)

// Reasons of the Accepted condition.
const (
	ReasonAccepted              = "Accepted"
	ReasonNodeClassNotFound     = nodesetv1alpha1.ReasonNodeClassNotFound
	ReasonNodeClassDeleting     = "NodeClassDeleting"
	ReasonNodeClassInvalid      = "NodeClassInvalid"
	ReasonDriverNotServed       = nodesetv1alpha1.ReasonDriverNotServed
	ReasonNodeClassNotValidated = nodesetv1alpha1.ReasonNodeClassNotValidated
	ReasonNamespaceNotAllowed   = nodesetv1alpha1.ReasonNamespaceNotAllowed
	ReasonOverrideNotAllowed    = "OverrideNotAllowed"
	ReasonInvalidTemplate       = "InvalidTemplate"
	ReasonLimitExceeded         = nodesetv1alpha1.ReasonLimitExceeded
	ReasonStrategyNotSupported  = "StrategyNotSupported"
)

var everything = labels.Everything()

// resolution is a NodeSet understood under its class.
type resolution struct {
	class        *nodesetv1alpha1.NodeClass
	effective    nodesetv1alpha1.NodeClassSpec
	templateHash string
	// group is true when the class's driver runs cloud groups: the node
	// controller makes the set's Nodes from the group's machines.
	group bool
	// revalidating is true while a node controller has yet to validate a
	// new generation of a class it had found valid: nothing is done for the
	// set, and its Accepted condition is left as it was.
	revalidating bool
	// accepted is the Accepted condition; Status False stops creations and deletions.
	accepted metav1.Condition
	// recheck, when not 0, is when the verdict may change with no event:
	// the claim on the class's driver may expire, or its grace end.
	recheck time.Duration
	// unobserved is true when the sync has not acted on the set's
	// generation (revalidating, or its earlier writes not all observed):
	// the status keeps the observedGeneration it had.
	unobserved bool
	// created is true when the sync asked for Nodes.
	created bool
}

func notAccepted(reason, format string, args ...any) metav1.Condition {
	return metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionFalse,
		Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// resolve checks a NodeSet against its class: the class exists and is served
// and valid, the namespace may use it, the overrides stay inside its boundary
// and the template is well-formed. Limits are checked when scaling.
func (c *Controller) resolve(set *nodesetv1alpha1.NodeSet) resolution {
	class, err := c.nodeClassLister.Get(set.Spec.NodeClassName)
	if err != nil {
		return resolution{accepted: notAccepted(ReasonNodeClassNotFound,
			"NodeClass %q does not exist", set.Spec.NodeClassName)}
	}
	return c.resolveWith(set, class)
}

// resolveWith is resolve with the class already read. The rules that
// protect other tenants (the namespace may use the class, the overrides
// stay inside its boundary, nothing reaches a Node that a tenant may not
// set) are checked first, whatever the driver's verdict on the class: a
// class not yet validated is no way around them.
func (c *Controller) resolveWith(set *nodesetv1alpha1.NodeSet, class *nodesetv1alpha1.NodeClass) resolution {
	var err error
	res := resolution{class: class}
	if ok, why := c.namespaceAllowed(class, set.Namespace); !ok {
		res.accepted = notAccepted(ReasonNamespaceNotAllowed, "%s", resolve.NamespaceNotAllowedMessage(class, set.Namespace, why))
		return res
	}
	res.effective, err = resolve.EffectiveSpec(class, set)
	if err != nil {
		// A restricted field or a section of another driver: both are
		// overrides the class does not allow.
		res.accepted = notAccepted(ReasonOverrideNotAllowed, "%s", err)
		return res
	}
	if problems := append(resolve.TenantErrors(set), resolve.NodeAnnotationErrors(class, set)...); len(problems) > 0 {
		res.accepted = notAccepted(ReasonInvalidTemplate, "%s", strings.Join(problems, "; "))
		return res
	}
	if problems := append(resolve.TemplateConflicts(class, set), c.catalogueConflicts(class, set)...); len(problems) > 0 {
		res.accepted = notAccepted(ReasonOverrideNotAllowed, "%s", strings.Join(problems, "; "))
		return res
	}
	if createdAfterDeletion(set, class) {
		res.accepted = notAccepted(ReasonNodeClassDeleting,
			"NodeClass %q is being deleted: it waits for its NodeSets to go, and takes no new one", class.Name)
		return res
	}
	valid := findCondition(class.Status.Conditions, nodesetv1alpha1.NodeClassValid)
	switch {
	case valid != nil && valid.ObservedGeneration != class.Generation && valid.Status == metav1.ConditionTrue && c.revalidating(class):
		res.revalidating = true
		res.accepted = notAccepted(ReasonNodeClassNotValidated,
			"the node controller serving driver %q is validating generation %d of NodeClass %q", class.Spec.Driver, class.Generation, class.Name)
		return res
	case valid == nil || valid.ObservedGeneration != class.Generation:
		res.accepted, res.recheck = c.unvalidated(set, class)
		return res
	case valid.Status != metav1.ConditionTrue:
		res.accepted = notAccepted(ReasonNodeClassInvalid, "NodeClass %q is not valid: %s", class.Name, valid.Message)
		return res
	case class.Status.DriverKind == "":
		res.accepted = notAccepted(ReasonDriverNotServed,
			"the node controller serving driver %q has not said what kind of driver it is (status.driverKind of NodeClass %q)", class.Spec.Driver, class.Name)
		return res
	}
	res.group = class.Status.DriverKind == nodesetv1alpha1.DriverKindGroup
	if set.Spec.Strategy.Type == nodesetv1alpha1.ManagedStrategy && !res.group {
		res.accepted = notAccepted(ReasonStrategyNotSupported,
			"spec.strategy.type Managed lets a group driver roll the nodes, and NodeClass %q uses driver %q, which rolls nothing itself: use RollingUpdate or OnDelete",
			class.Name, class.Spec.Driver)
		return res
	}
	res.templateHash = resolve.TemplateHash(&res.effective, set)
	res.accepted = metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue,
		Reason: ReasonAccepted, Message: fmt.Sprintf("NodeClass %q (driver %s) accepts this NodeSet", class.Name, class.Spec.Driver)}
	return res
}

// catalogueConflicts is resolve.CatalogueConflicts against every class in
// the cache: the labels other classes stamp are theirs, whichever class
// the set is of.
func (c *Controller) catalogueConflicts(class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) []string {
	classes, err := c.nodeClassLister.List(everything)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the NodeClasses whose labels a NodeSet may not set: %v", err)}
	}
	return resolve.CatalogueConflicts(classes, class, set)
}

// createdAfterDeletion reports whether the set was created after its
// class's deletion began. The webhook refuses to create such a set; one
// that got in while the webhook was away gets no Node and does not hold the
// class. Timestamps are whole seconds: a set of the same second as the
// deletion counts as one from before.
func createdAfterDeletion(set *nodesetv1alpha1.NodeSet, class *nodesetv1alpha1.NodeClass) bool {
	return class.DeletionTimestamp != nil && set.CreationTimestamp.After(class.DeletionTimestamp.Time)
}

// revalidationGrace is how long a new generation of a valid class may wait
// for its node controller's verdict before its NodeSets say so
// (NodeClassNotValidated, or DriverNotServed when no node controller serves
// its driver); meanwhile they keep the Accepted condition they had.
const revalidationGrace = 30 * time.Second

// revalidating reports whether the class's current generation has waited
// for validation less than revalidationGrace, counted from when this
// controller first saw it unvalidated.
func (c *Controller) revalidating(class *nodesetv1alpha1.NodeClass) bool {
	c.revalidationMu.Lock()
	defer c.revalidationMu.Unlock()
	seen, ok := c.revalidation[class.Name]
	if !ok || seen.generation != class.Generation {
		seen = generationSeen{generation: class.Generation, since: c.now()}
		c.revalidation[class.Name] = seen
	}
	return c.now().Sub(seen.since) < revalidationGrace
}

// unvalidated is the Accepted condition of a set whose class's current
// generation no node controller has validated: NodeClassNotValidated while
// a node controller claims the class's driver (or, for the claim grace,
// none has yet), DriverNotServed once none does. It also says when that
// may change with no event.
func (c *Controller) unvalidated(set *nodesetv1alpha1.NodeSet, class *nodesetv1alpha1.NodeClass) (metav1.Condition, time.Duration) {
	old := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	notServedBefore := old != nil && old.Reason == ReasonDriverNotServed && set.Status.ObservedClassGeneration == class.Generation
	check := c.claims.check(class.Spec.Driver, c.now(), notServedBefore)
	if check.notServed != "" {
		return notAccepted(ReasonDriverNotServed, "no node controller serves driver %q, so nothing validates NodeClass %q: %s",
			class.Spec.Driver, class.Name, check.notServed), check.recheck
	}
	return notAccepted(ReasonNodeClassNotValidated, "NodeClass %q waits for the node controller serving driver %q to validate generation %d: %s",
		class.Name, class.Spec.Driver, class.Generation, check.waiting), check.recheck
}

// generationSeen is when a class generation was first seen unvalidated.
type generationSeen struct {
	generation int64
	since      time.Time
}

// namespaceAllowed is resolve.NamespaceRefusal with the Namespace's
// labels from namespaceLabels.
func (c *Controller) namespaceAllowed(class *nodesetv1alpha1.NodeClass, namespace string) (bool, string) {
	why := resolve.NamespaceRefusal(class, namespace, c.namespaceLabels)
	return why == "", why
}

// namespaceLabels reads a Namespace's labels from the cache, or from the
// API server when the cache does not hold it yet.
func (c *Controller) namespaceLabels(namespace string) (map[string]string, error) {
	ns, err := c.namespaceLister.Get(namespace)
	if apierrors.IsNotFound(err) {
		// Just created, maybe, and not in the cache yet.
		ns, err = c.kubeClient.CoreV1().Namespaces().Get(context.TODO(), namespace, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return ns.Labels, nil
}

func findCondition(conditions []metav1.Condition, conditionType string) *metav1.Condition {
	for i := range conditions {
		if conditions[i].Type == conditionType {
			return &conditions[i]
		}
	}
	return nil
}
