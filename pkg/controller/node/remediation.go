package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/resolve"
)

// Event and condition reasons of remediation.
const (
	ReasonUnhealthy        = "Unhealthy"
	ReasonTooManyUnhealthy = "TooManyUnhealthy"
	ReasonWithinLimit      = "WithinLimit"
	// ReasonRemediationHeld: a Node due for replacement that the cap holds back.
	ReasonRemediationHeld = "RemediationHeld"
)

// RemediationOptions say when unhealthy Nodes are replaced, and how many.
type RemediationOptions struct {
	// UnhealthyTimeout is how long a registered Node may be NotReady before
	// it is replaced; 0 never replaces registered Nodes.
	UnhealthyTimeout time.Duration
	// MaxUnhealthyPercent and MaxUnhealthy cap the unhealthy Nodes of a
	// NodeSet (registered and NotReady, overdue or not; unregistered past
	// the class's registrationTimeout; or being replaced for either): while
	// there are more, none is replaced. The cap is the percentage of replicas, rounded
	// up, at least 1 and at most MaxUnhealthy.
	MaxUnhealthyPercent int
	MaxUnhealthy        int
}

// remediationCap is how many unhealthy Nodes a NodeSet of replicas may have
// for them to be replaced.
func (o RemediationOptions) remediationCap(replicas int32) int {
	limit := (int(replicas)*o.MaxUnhealthyPercent + 99) / 100
	limit = max(limit, 1)
	if o.MaxUnhealthy > 0 {
		limit = min(limit, o.MaxUnhealthy)
	}
	return limit
}

// registrationTimeout of a class, or the default.
func registrationTimeout(class *nodesetv1alpha1.NodeClass) time.Duration {
	if class != nil && class.Spec.RegistrationTimeout != nil {
		return class.Spec.RegistrationTimeout.Duration
	}
	return defaultRegistrationTimeout
}

// unhealthyFor returns how long past its deadline a Node is unhealthy (>= 0),
// or a negative duration until it would be: NotReady since its Ready
// condition's last transition for a registered Node, not Ready since its
// machine was made for an unregistered one; either counted from this
// controller's start instead, if later.
func (c *Controller) unhealthyFor(node *corev1.Node, class *nodesetv1alpha1.NodeClass) (time.Duration, bool) {
	now := c.opts.Now()
	if node.DeletionTimestamp != nil || node.Spec.ProviderID == "" || nodeutil.IsReady(node) {
		return 0, false
	}
	if nodeutil.HasStartupTaint(node) {
		created, ok := machineCreated(node)
		if !ok {
			created = node.CreationTimestamp.Time
		}
		// The outage that kept this controller away may have kept the
		// machine's kubelet from registering (an API server it could not
		// reach; simulated kubelets run in this controller): it gets the
		// whole registration timeout from the start, as a NotReady Node
		// gets the whole unhealthy timeout.
		if c.started.After(created) {
			created = c.started
		}
		return now.Sub(created.Add(registrationTimeout(class))), true
	}
	if c.opts.Remediation.UnhealthyTimeout <= 0 {
		return 0, false
	}
	since := node.CreationTimestamp.Time
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			since = cond.LastTransitionTime.Time
		}
	}
	// A controller that was away, restarted or newly leader gives each
	// Node the whole timeout from when it started watching, as the node
	// lifecycle controller gives each its whole grace period: the outage
	// that kept it away may have kept kubelets from reporting too.
	if c.started.After(since) {
		since = c.started
	}
	return now.Sub(since.Add(c.opts.Remediation.UnhealthyTimeout)), true
}

// mayReplace reports whether the NodeSet of node has few enough unhealthy
// Nodes for node to be replaced, and records the answer in the NodeSet's
// RemediationAllowed condition when it changes.
func (c *Controller) mayReplace(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass) (bool, error) {
	namespace, name := node.Labels[nodesetv1alpha1.LabelNodeSetNamespace], node.Labels[nodesetv1alpha1.LabelNodeSet]
	set, err := c.sets.NodeSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return true, nil // the set is going: its Nodes go anyway
	}
	if err != nil {
		return false, err
	}
	nodes, err := c.nodes.List(resolve.Selector(set))
	if err != nil {
		return false, err
	}
	// Its replicas only: a Node its kubelet labelled with the set's labels
	// must not hold back the set's repairs by being NotReady.
	nodes = nodeutil.Replicas(nodes, class, c.opts.Now())
	unhealthy := 0
	for _, n := range nodes {
		if n.DeletionTimestamp != nil {
			if n.Annotations[nodesetv1alpha1.AnnotationRemediated] != "" {
				unhealthy++ // still being replaced
			}
			continue
		}
		// A registered Node counts as soon as it is NotReady, overdue or
		// not: Nodes of one wave turn NotReady (and so become overdue) a
		// little apart, and the first to be overdue must not be replaced
		// as if it were alone. One still starting counts once overdue.
		if overdue, ok := c.unhealthyFor(n, class); ok && (overdue >= 0 || !nodeutil.HasStartupTaint(n)) {
			unhealthy++
		}
	}
	replicas := plan.Replicas(set)
	limit := c.opts.Remediation.remediationCap(replicas)
	allowed := unhealthy <= limit
	cond := metav1.Condition{Type: nodesetv1alpha1.NodeSetRemediationAllowed, Status: metav1.ConditionTrue, Reason: ReasonWithinLimit,
		Message: fmt.Sprintf("%d of %d nodes unhealthy; up to %d are replaced automatically", unhealthy, replicas, limit)}
	if !allowed {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonTooManyUnhealthy
		cond.Message = fmt.Sprintf("%d of %d nodes are unhealthy, more than the %d replaced automatically (%d%% of replicas, at most %d): "+
			"none is replaced until fewer are; find the common cause, or delete nodes by hand",
			unhealthy, replicas, limit, c.opts.Remediation.MaxUnhealthyPercent, c.opts.Remediation.MaxUnhealthy)
	}
	existing := meta.FindStatusCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetRemediationAllowed)
	// Write a block always (its numbers change), a lifted block once; a set
	// that was never blocked gets no write.
	if !allowed || (existing != nil && existing.Status == metav1.ConditionFalse) {
		if existing == nil || existing.Status != cond.Status || existing.Message != cond.Message {
			if !allowed && (existing == nil || existing.Status != cond.Status) {
				c.recorder.Event(set, corev1.EventTypeWarning, ReasonTooManyUnhealthy, cond.Message)
			}
			if err := c.setCondition(ctx, namespace, name, cond); err != nil {
				return false, err
			}
		}
	}
	return allowed, nil
}

func (c *Controller) setCondition(ctx context.Context, namespace, name string, cond metav1.Condition) error {
	client := c.opts.NodeSets
	if client == nil {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := client.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond.ObservedGeneration = set.Generation
		if !meta.SetStatusCondition(&set.Status.Conditions, cond) {
			return nil
		}
		_, err = client.NodesetV1alpha1().NodeSets(namespace).UpdateStatus(ctx, set, metav1.UpdateOptions{})
		return err
	})
}

// replaceUnhealthy deletes a NodeSet's Node that stayed NotReady past the
// unhealthy timeout, within the remediation cap; the NodeSetController makes
// the replacement and the deletion path drains and deprovisions it.
func (c *Controller) replaceUnhealthy(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass) error {
	if _, _, ok := nodeutil.NodeSetOf(node.Labels); !ok {
		return nil // a static Node (its labels name no whole NodeSet) is left to its owner
	}
	overdue, ok := c.unhealthyFor(node, class)
	if !ok {
		return nil
	}
	if overdue < 0 {
		c.queue.AddAfter(node.Name, -overdue)
		return nil
	}
	reason := "NotReady"
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			reason = fmt.Sprintf("Ready=%s (%s: %s)", cond.Status, cond.Reason, cond.Message)
		}
	}
	return c.remediate(ctx, node, class, ReasonUnhealthy,
		fmt.Sprintf("%s for more than %s; replacing it", reason, c.opts.Remediation.UnhealthyTimeout))
}

// remediate replaces a NodeSet's Node within the cap: it marks the Node
// remediated and deletes it (UID precondition). Over the cap it waits.
func (c *Controller) remediate(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass, reason, message string) error {
	allowed, err := c.mayReplace(ctx, node, class)
	if err != nil {
		return err
	}
	if !allowed {
		// Said on the Node each time it is looked at, with the same words,
		// so the Events count up: the decision not to act, made and seen.
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonRemediationHeld,
			"Not replaced (%s): too many nodes of NodeSet %s/%s are unhealthy; see its RemediationAllowed condition",
			reason, node.Labels[nodesetv1alpha1.LabelNodeSetNamespace], node.Labels[nodesetv1alpha1.LabelNodeSet])
		c.queue.AddAfter(node.Name, remediationRecheck)
		return nil
	}
	c.recorder.Event(node, corev1.EventTypeWarning, reason, message)
	c.tellSet(node, corev1.EventTypeWarning, reason, message)
	klog.FromContext(ctx).Info("Replacing node", "reason", reason, "message", message)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": node.UID, "annotations": map[string]string{nodesetv1alpha1.AnnotationRemediated: reason}}})
	if err != nil {
		return err
	}
	if _, err := c.kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	uid := node.UID
	err = c.kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// remediationRecheck is how often a Node waiting on the cap is looked at again.
const remediationRecheck = 30 * time.Second
