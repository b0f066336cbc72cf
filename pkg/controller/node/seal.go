package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

// sealIndex indexes the relabelled Nodes by their seal
// (nodeutil.IndexRelabelledBySeal).
const sealIndex = "seal"

// strayed reports whether a Node sealed for the NodeSet namespace/name of
// class was relabelled by its kubelet: the nodeset controller puts its
// labels back, and until then the set's group is neither resized nor
// deleted (counted without it, the group would be raised for a
// replacement that is one too many once the labels are back).
func (c *Controller) strayed(namespace, name, class string) bool {
	objs, err := c.nodeIndexer.ByIndex(sealIndex, nodeutil.Seal(namespace, name, class))
	return err != nil || len(objs) > 0 // not known: as if so, which holds the group a moment
}

// ownedBy reports whether a Node is one of the NodeSet namespace/name of
// class: by its seal when it has one, else by its labels.
func ownedBy(node *corev1.Node, namespace, name, class string) bool {
	if seal, ok := node.Labels[nodesetv1alpha1.LabelSeal]; ok {
		return seal == nodeutil.Seal(namespace, name, class)
	}
	return node.Labels[nodesetv1alpha1.LabelNodeSetNamespace] == namespace && node.Labels[nodesetv1alpha1.LabelNodeSet] == name
}

// ReasonNodeLabelsTampered is the Warning Event of a Node whose NodeSet or
// NodeClass labels do not match its seal: its kubelet relabelled it.
const ReasonNodeLabelsTampered = "NodeLabelsTampered"

// ReasonNodeNotSealed is the Warning Event of a Node that holds nodeset's
// finalizer and claims a NodeClass without a seal, made after the class's
// status.sealedSince or found once it is past: nodeset did not make it
// (nodeutil.Stranger), and marks it with the seal "none".
const ReasonNodeNotSealed = "NodeNotSealed"

// markStranger gives a Node that is none of nodeset's (nodeutil.Stranger)
// the seal "none", which no labels match: every listing then leaves it out
// of every NodeSet and class, as a relabelled Node, and its kubelet cannot
// take the seal off to be taken for nodeset's again (not even once the
// class's status.sealedSince is lost). Nothing is done to any machine for
// it, its deletion included: its finalizer is taken off by hand. This is
// done by the node controller serving the class's driver, once per Node.
func (c *Controller) markStranger(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass) error {
	if _, served := c.registry[class.Spec.Driver]; !served {
		return nil
	}
	claim := "NodeClass " + class.Name
	if namespace, name, ok := nodeutil.NodeSetOf(node.Labels); ok {
		claim = fmt.Sprintf("NodeSet %s/%s of NodeClass %s", namespace, name, class.Name)
	}
	// The names quoted are label values: at most 63 characters of a small
	// alphabet, as the API server validates them.
	c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonNodeNotSealed,
		"The Node claims %s and holds finalizer %s, but nodeset did not make it: it has no %s label, which nodeset gives every Node of the class it makes or holds since the class's status.sealedSince (%s). "+
			"It belongs to no NodeSet or class, and no machine is made or removed for it; it is marked %s=%s. To delete it, remove the finalizer by hand",
		claim, nodesetv1alpha1.FinalizerTermination, nodesetv1alpha1.LabelSeal, class.Status.SealedSince.UTC().Format(time.RFC3339),
		nodesetv1alpha1.LabelSeal, nodesetv1alpha1.SealNone)
	klog.FromContext(ctx).Info("A Node nodeset did not make claims a class; marked as none of nodeset's", "node", node.Name, "nodeclass", class.Name)
	return c.markNone(ctx, node)
}

// markNone gives the Node the seal "none" (nodesetv1alpha1.SealNone): it
// belongs to no NodeSet or class from then on, and is left alone
// (restoreLabels).
func (c *Controller) markNone(ctx context.Context, node *corev1.Node) error {
	want := maps.Clone(node.Labels)
	want[nodesetv1alpha1.LabelSeal] = nodesetv1alpha1.SealNone
	return c.patchLabels(ctx, node, want, "marking")
}

// setSealIndex indexes NodeSets by the seal of their Nodes
// (nodeutil.IndexSetBySeal).
const setSealIndex = "seal"

// sealOwner is what a seal was made for: a NodeSet this controller knows
// (namespace, name and class), or a static Node of a NodeClass (namespace
// and name empty). ok is false for a seal of neither.
func (c *Controller) sealOwner(seal string) (namespace, name, class string, ok bool) {
	objs, err := c.setIndexer.ByIndex(setSealIndex, seal)
	if err == nil {
		for _, obj := range objs {
			if set, isSet := obj.(*nodesetv1alpha1.NodeSet); isSet {
				return set.Namespace, set.Name, set.Spec.NodeClassName, true
			}
		}
	}
	classes, err := c.classes.List(labels.Everything())
	if err != nil {
		return "", "", "", false
	}
	for _, cl := range classes {
		if nodeutil.Seal("", "", cl.Name) == seal {
			return "", "", cl.Name, true
		}
	}
	return "", "", "", false
}

// restoreLabels puts back the NodeSet and NodeClass labels of a Node its
// kubelet relabelled, as its seal says they were, and tells on the Node
// once per change of it. This is done by the node controller that serves
// the driver of the Node's class; a Node whose seal is of no NodeSet or
// class this controller knows keeps its labels, and nothing is done to its
// machine until they are put back by hand.
func (c *Controller) restoreLabels(ctx context.Context, node *corev1.Node) error {
	if node.Labels[nodesetv1alpha1.LabelSeal] == nodesetv1alpha1.SealNone {
		return nil // none of nodeset's, and told so when marked (markStranger)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", node.Name)
	namespace, name, class, known := c.sealOwner(node.Labels[nodesetv1alpha1.LabelSeal])
	driverName := node.Annotations[nodesetv1alpha1.AnnotationDriver]
	if cl, err := c.classes.Get(class); known && err == nil {
		driverName = cl.Spec.Driver
	}
	if _, served := c.registry[driverName]; !served {
		return nil // another node controller's, or none's
	}
	claims := fmt.Sprintf("The Node claims %s=%q, %s=%q, %s=%q, which do not match the labels nodeset gave it (%s)",
		nodesetv1alpha1.LabelNodeSetNamespace, node.Labels[nodesetv1alpha1.LabelNodeSetNamespace],
		nodesetv1alpha1.LabelNodeSet, node.Labels[nodesetv1alpha1.LabelNodeSet],
		nodesetv1alpha1.LabelNodeClass, node.Labels[nodesetv1alpha1.LabelNodeClass], nodesetv1alpha1.LabelSeal)
	if !known {
		c.reportTampered(node, claims+": it is no Node of any NodeSet or class, and no NodeSet or NodeClass nodeset knows has its seal; "+
			"nothing is done to its machine until its labels are put back")
		logger.Info("Node relabelled by its kubelet, of no NodeSet or class known: left alone")
		return nil
	}
	want := maps.Clone(node.Labels)
	owner := "a static Node of NodeClass " + class
	if name == "" {
		delete(want, nodesetv1alpha1.LabelNodeSetNamespace)
		delete(want, nodesetv1alpha1.LabelNodeSet)
	} else {
		want[nodesetv1alpha1.LabelNodeSetNamespace], want[nodesetv1alpha1.LabelNodeSet] = namespace, name
		owner = fmt.Sprintf("NodeSet %s/%s of NodeClass %s", namespace, name, class)
	}
	want[nodesetv1alpha1.LabelNodeClass] = class
	c.reportTampered(node, claims+": it is no Node of that NodeSet or class; its labels are put back to those of "+owner)
	now := c.opts.Now()
	restored, _ := c.restored.get(node)
	if now.Sub(restored.last) > restoresForgotten {
		restored = restoreRecord{}
	}
	if wait := restored.last.Add(restoreBackoff(restored.count)).Sub(now); wait > 0 {
		// A kubelet that relabels its Node again and again spends this
		// controller's writes, which every tenant's Nodes share: past the
		// first few, each restore waits longer. Until then the Node is of
		// no set or class, and only its own set waits for it.
		logger.V(2).Info("Node relabelled again by its kubelet; its labels are put back later", "restored", restored.count, "after", wait)
		c.queue.AddAfter(node.Name, wait)
		return nil
	}
	if err := c.patchLabels(ctx, node, want, "putting back the labels of"); err != nil {
		return err
	}
	c.restored.set(node, restoreRecord{count: restored.count + 1, last: now})
	return nil
}

// restoreRecord is how often a Node's labels were put back lately, and
// when last.
type restoreRecord struct {
	count int
	last  time.Time
}

const (
	// freeRestores are the restores of a Node's labels made at once; each
	// one after waits twice as long as the one before, from a second up to
	// maxRestoreWait.
	freeRestores   = 3
	maxRestoreWait = 5 * time.Minute
	// restoresForgotten is how long a Node's kubelet must leave its labels
	// alone for its restores to be made at once again.
	restoresForgotten = 10 * time.Minute
)

// restoreBackoff is how long after the last restore of a Node's labels,
// restored times lately, the next one may be made.
func restoreBackoff(restored int) time.Duration {
	if restored < freeRestores {
		return 0
	}
	return min(time.Second<<min(restored-freeRestores, 16), maxRestoreWait)
}

// reportTampered records the Warning Event of a relabelled Node, once per
// version of the Node: a sync of the same copy again (the cache has not
// caught up with the labels put back) says nothing new.
func (c *Controller) reportTampered(node *corev1.Node, message string) {
	if rv, ok := c.tamperedReported.get(node); ok && rv == node.ResourceVersion {
		return
	}
	c.tamperedReported.set(node, node.ResourceVersion)
	// The values quoted are label values: at most 63 characters of a
	// small alphabet, as the API server validates them.
	c.recorder.Event(node, corev1.EventTypeWarning, ReasonNodeLabelsTampered, message)
}

// sealed are the labels of a Node nodeset holds (its termination finalizer)
// that lacks the seal, sealed as labelled now, and on a Dedicated class
// with the restricted tenant label it lacks (a Node made before either
// existed); ok is false when it lacks neither.
func sealed(node *corev1.Node, class *nodesetv1alpha1.NodeClass) (want map[string]string, ok bool) {
	if node.DeletionTimestamp != nil || node.Labels[nodesetv1alpha1.LabelNodeClass] == "" ||
		!slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) {
		return nil, false
	}
	_, hasSeal := node.Labels[nodesetv1alpha1.LabelSeal]
	_, hasTenant := node.Labels[nodesetv1alpha1.LabelTenantRestricted]
	namespace, _, ofSet := nodeutil.NodeSetOf(node.Labels)
	lacksTenant := ofSet && class.Spec.Tenancy == nodesetv1alpha1.TenancyDedicated && !hasTenant
	if hasSeal && !lacksTenant {
		return nil, false // as every Node once sealed: nothing copied
	}
	want = maps.Clone(node.Labels)
	if !hasSeal {
		want[nodesetv1alpha1.LabelSeal] = nodeutil.SealOf(node.Labels)
	}
	if lacksTenant {
		want[nodesetv1alpha1.LabelTenantRestricted] = namespace
	}
	return want, true
}

// sealPeriod is how often the node controller looks for Nodes it holds
// that lack their seal, beside the sync of a registered Node, which seals
// it: at its start (an upgrade), and after, for the Nodes an earlier
// nodeset controller still makes during a rolling upgrade.
const sealPeriod = 5 * time.Minute

// sealUnsealed seals the Nodes of the classes this controller serves that
// nodeset holds and that have no seal, as they are labelled now (sealed),
// and marks those nodeset did not make (markStranger), one write each,
// paced by the client's rate limit.
func (c *Controller) sealUnsealed(ctx context.Context) {
	logger := klog.FromContext(ctx)
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return
	}
	for _, node := range nodes {
		class, err := c.classes.Get(node.Labels[nodesetv1alpha1.LabelNodeClass])
		if err != nil || nodeutil.Tampered(node.Labels) {
			continue
		}
		if _, served := c.registry[class.Spec.Driver]; !served {
			continue
		}
		if nodeutil.Stranger(node, class, c.opts.Now()) {
			if err := c.markStranger(ctx, node, class); err != nil {
				logger.Info("Could not mark a Node nodeset did not make; tried again later", "node", node.Name, "err", c.scrubbedError(err))
			}
			continue
		}
		if driver := node.Annotations[nodesetv1alpha1.AnnotationDriver]; driver != "" && driver != class.Spec.Driver {
			continue
		}
		want, ok := sealed(node, class)
		if !ok {
			continue
		}
		if err := c.patchLabels(ctx, node, want, "sealing"); err != nil {
			logger.Info("Could not seal a Node; tried again later", "node", node.Name, "err", c.scrubbedError(err))
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// patchLabels makes the Node's labels want, as read (nodeutil.ChangePatch).
func (c *Controller) patchLabels(ctx context.Context, node *corev1.Node, want map[string]string, what string) error {
	changed := node.DeepCopy()
	changed.Labels = want
	patch, ok := nodeutil.ChangePatch(node, changed)
	if !ok {
		return nil
	}
	_, err := c.kube.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s Node %s: %w", what, node.Name, err)
	}
	klog.FromContext(ctx).Info("Wrote the labels of a Node", "node", node.Name, "what", what)
	return nil
}
