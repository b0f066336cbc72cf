package nodeset

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/resolve"
)

// slowStartInitialBatchSize is the first batch of creations; each successful
// batch doubles the next, so a failing API server sees one failed call, not a storm.
const slowStartInitialBatchSize = 1

// MaxNodeWritesInFlight caps the Node creations and deletions the controller
// has in flight at once, over all NodeSets. The client's QPS limit paces the
// requests anyway; what this bounds is how many wait at the API server. A
// burst of 500 deletions sent at once overflows the queues that API Priority
// and Fairness gives one flow (6 queues of 50 by default) and comes back as
// 429 Too Many Requests, to be sent again.
const MaxNodeWritesInFlight = 32

// writeNode runs one Node create or delete when a slot is free.
func (c *Controller) writeNode(ctx context.Context, write func() error) error {
	select {
	case c.nodeWrites <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.nodeWrites }()
	return write()
}

// ReasonSyncPanicked is the Event reason of a NodeSet whose sync panicked.
const ReasonSyncPanicked = "SyncPanicked"

// syncNodeSet reconciles the NodeSet of key. A panic (on a NodeSet the code
// did not expect) fails this set's sync alone, retried with backoff and told
// on the set, instead of taking down the process and with it every other
// tenant's NodeSets.
func (c *Controller) syncNodeSet(ctx context.Context, key string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicked(ctx, r, "sync of NodeSet "+key)
			if namespace, name, splitErr := cache.SplitMetaNamespaceKey(key); splitErr == nil {
				if set, getErr := c.nodeSetLister.NodeSets(namespace).Get(name); getErr == nil {
					c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonSyncPanicked, "%v; retried with backoff", err)
				}
			}
		}
	}()
	return c.reconcileNodeSet(ctx, key)
}

// panicked is the error of a recovered panic in what, logged with its stack.
func panicked(ctx context.Context, r any, what string) error {
	err := fmt.Errorf("%s panicked: %v", what, r)
	klog.FromContext(ctx).Error(err, "Recovered from a panic", "stack", string(debug.Stack()))
	return err
}

// guarded is fn's error, or that of its panic: the Node writes of a sync run
// in goroutines of their own, where a panic would pass the sync's recovery
// by and take the process down.
func guarded(ctx context.Context, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = panicked(ctx, r, "a Node write")
		}
	}()
	return fn()
}

func (c *Controller) reconcileNodeSet(ctx context.Context, key string) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "nodeset", key)
	ctx = klog.NewContext(ctx, logger)
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.nodeSetLister.NodeSets(namespace).Get(name)
	if isNotFound(err) {
		c.expectations.forget(key)
		c.statusMu.Lock()
		delete(c.sizes, key)
		delete(c.lastStatus, key)
		c.statusMu.Unlock()
		return c.deleteOrphanedNodes(ctx, key, namespace, name)
	}
	if err != nil {
		return err
	}
	set := cached.DeepCopy()
	if err := c.settleUnknownCreates(ctx, cached, key); err != nil {
		return err
	}
	if err := c.settleUnknownDeletes(ctx, key); err != nil {
		return err
	}
	// Whether the set's earlier creations and deletions are all observed is
	// asked before its Nodes are listed: asked after, a Node observed in
	// between would be neither in the list nor expected, and be made again.
	observed := c.expectations.satisfied(key)
	nodes, err := c.setNodes(key)
	if err != nil {
		return err
	}
	// A Node of the set that its kubelet relabelled is no Node of the set
	// until the node controller has put its labels back: the set waits
	// for that, deleted or not, and neither makes nor deletes a Node
	// meanwhile (counted without it, it would make a replacement that is
	// one too many once the labels are back). The Node's update brings
	// the set back here.
	strayed, err := c.strayedNodes(set)
	if err != nil {
		return err
	}
	if len(strayed) > 0 {
		logger.Info("A Node of the set is relabelled by its kubelet; the set waits for its labels to be put back", "node", klog.KObj(strayed[0]))
		return nil
	}

	if set.DeletionTimestamp != nil {
		err := c.finalize(ctx, set, nodes)
		if len(nodes) > 0 {
			// Its Nodes drain and go: the status counts them down, as a
			// Deployment's does while it is deleted.
			err = errors.Join(err, c.updateStatus(ctx, set, deletingStatus(set, nodes, c.now())))
		}
		return err
	}
	nodes, earlier := ofClass(nodes, set.Spec.NodeClassName)
	if len(earlier) > 0 {
		if err := c.deleteNodesOfAGoneSet(ctx, key, earlier); err != nil {
			return err
		}
	}
	if !slices.Contains(set.Finalizers, FinalizerNodes) {
		updated, err := c.patchSetMetadata(ctx, set, map[string]any{"finalizers": append(slices.Clone(set.Finalizers), FinalizerNodes)})
		if err != nil {
			return err
		}
		set = updated
	}

	res := c.resolve(set)
	var manageErr error
	if res.accepted.Status == metav1.ConditionTrue && observed {
		manageErr = c.manageReplicas(ctx, set, &res, nodes)
	}
	if waitingForRoom(cached) && !res.created && !res.revalidating && res.accepted.Reason != ReasonLimitExceeded &&
		(res.accepted.Status != metav1.ConditionTrue || observed) {
		// The set waited for room, and may have been woken for some
		// (wakeLimited), but takes none: refused for another reason now,
		// or it has all it wants. The room passes to the next set
		// waiting, rather than waiting for the next machine gone. It
		// waits no longer from this status on, so it passes room on once.
		c.wakeLimited(set.Spec.NodeClassName, key)
	}
	if res.revalidating {
		// A class edit is validated in a moment: the set keeps its Accepted
		// condition meanwhile, with no Event, and is looked at again soon.
		if old := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted); old != nil {
			res.accepted = *old
		}
		// The current template is not known until then: the status keeps
		// the one it recorded (else every Node would count as outdated and
		// the set look mid-rollout), and claims no new generation.
		res.templateHash = set.Status.TemplateHash
		c.queue.AddAfter(key, time.Second)
	} else if res.accepted.Status != metav1.ConditionTrue {
		if res.recheck > 0 {
			// The claim on the class's driver may expire, or its grace
			// end, with no event: the set is looked at again then.
			c.queue.AddAfter(key, res.recheck+time.Second)
		}
		old := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted)
		if old == nil || old.Reason != res.accepted.Reason || old.Message != conditionMessage(res.accepted.Message) {
			c.recorder.Event(set, corev1.EventTypeWarning, ReasonNotAccepted, res.accepted.Message)
		}
	}
	if err := c.pruneDeleteList(ctx, set, nodes); err != nil {
		return err
	}
	// The creations and deletions for this generation are not decided
	// until the earlier ones are observed: observedGeneration says a sync
	// has looked at the spec and acted on it (or decided not to).
	res.unobserved = res.revalidating || (res.accepted.Status == metav1.ConditionTrue && !observed)
	status := computeStatus(set, &res, nodes, manageErr, c.now())
	if !observed {
		if wait, ok := c.expectations.expiresIn(key); ok {
			// A write the informer never shows (made and undone while its
			// watch was down) holds the set until its expectations expire,
			// and no longer: it is looked at again then, whatever else happens.
			c.queue.AddAfter(key, wait+time.Second)
		}
	}
	if wait, ok := untilAvailable(set, nodes, c.now()); ok {
		// Nothing about the Node changes when it has been Ready for
		// minReadySeconds: the set is looked at again then, whatever this
		// sync wrote, so a rollout waiting for it goes on.
		c.queue.AddAfter(key, wait)
	}
	if deadline, ok := progressDeadline(set, status.LastProgressTime); ok && c.now().Before(deadline) {
		// Nothing need happen for the deadline to pass: the set is looked
		// at again then.
		c.queue.AddAfter(key, deadline.Sub(c.now())+time.Second)
	}
	if err := c.updateStatus(ctx, set, status); err != nil {
		return err
	}
	return manageErr
}

// manageReplicas creates and deletes Nodes so the set has spec.replicas
// Nodes of its current template, within its rollout strategy.
func (c *Controller) manageReplicas(ctx context.Context, set *nodesetv1alpha1.NodeSet, res *resolution, nodes []*corev1.Node) error {
	key := set.Namespace + "/" + set.Name
	p := plan.Decide(set, res.templateHash, nodes, c.now())
	if res.group {
		// The cloud group makes the machines and the node controller their
		// Nodes, within the class's limits; what is decided here is which
		// Nodes go, and whether the set asks for more than the limits allow.
		p.Create = 0
	}
	if p.Create == 0 && plan.Limited(res.class) {
		// Nothing to create, so no creation below weighs the limits: a set
		// of a limit lowered below it, or of a group, is told here.
		if used, err := c.ClassUsage(res.class, set.Namespace, key); err == nil {
			if refusal := plan.Fits(res.class, set.Namespace, used, int64(plan.Replicas(set))); refusal != "" {
				res.accepted = notAccepted(ReasonLimitExceeded, "%s", refusal)
			}
		}
	}
	var errs []error
	if want := min(p.Create, c.burst); want > 0 {
		if plan.Limited(res.class) {
			// One NodeSet of a limited class decides and creates at a time,
			// counting the creations of the others not yet in the cache, so
			// two NodeSets racing cannot overshoot the limit together.
			unlock := c.lockClass(res.class.Name)
			defer unlock()
			limit, why := c.creationLimit(res, set)
			klog.FromContext(ctx).V(2).Info("Creation within the class's limits", "nodeclass", res.class.Name, "want", want, "allowed", limit)
			if limit < want {
				res.accepted = notAccepted(ReasonLimitExceeded, "%s", why)
				want = limit
			}
		}
		if want > 0 {
			res.created = true
			errs = append(errs, c.createNodes(ctx, set, res, key, want))
		}
	}
	if len(p.Remove) > 0 {
		victims := p.Remove[:min(len(p.Remove), c.burst)]
		if p.Replacing {
			for _, v := range victims {
				if v.Labels[nodesetv1alpha1.LabelTemplateHash] == res.templateHash {
					continue // on the delete list, or beyond replicas: going, not replaced
				}
				c.recorder.Eventf(set, corev1.EventTypeNormal, ReasonReplacingNode,
					"Replacing outdated node %s (template %s, current %s)", v.Name, v.Labels[nodesetv1alpha1.LabelTemplateHash], res.templateHash)
			}
		}
		errs = append(errs, c.deleteNodes(ctx, set, key, victims))
	}
	return errors.Join(errs...)
}

// lockClass serializes the creation decisions of a class's NodeSets.
func (c *Controller) lockClass(name string) (unlock func()) {
	mu, _ := c.classLocks.LoadOrStore(name, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// classOf is the class of the NodeSet with the given key, "" when unknown.
func (c *Controller) classOf(key string) string {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return ""
	}
	set, err := c.nodeSetLister.NodeSets(namespace).Get(name)
	if err != nil {
		return ""
	}
	return set.Spec.NodeClassName
}

// pruneDeleteList drops from the set's delete-nodes annotation the names of
// Nodes that are gone.
func (c *Controller) pruneDeleteList(ctx context.Context, set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) error {
	listed := plan.DeleteList(set)
	if len(listed) == 0 {
		return nil
	}
	present := map[string]bool{}
	for _, n := range nodes {
		present[n.Name] = true
	}
	var keep []string
	for name := range listed {
		if present[name] {
			keep = append(keep, name)
		}
	}
	if len(keep) == len(listed) {
		return nil
	}
	sort.Strings(keep)
	var kept any // null: the annotation goes
	if len(keep) > 0 {
		kept = strings.Join(keep, ",")
	}
	result, err := c.patchSetMetadata(ctx, set, map[string]any{"annotations": map[string]any{nodesetv1alpha1.AnnotationDeleteNodes: kept}})
	if err != nil {
		return err
	}
	*set = *result
	return nil
}

// patchSetMetadata writes the given fields of a set's metadata and nothing
// else, if the set has not changed since it was read
// (nodeutil.GuardedMergePatch): a name added to the delete list meanwhile,
// or a finalizer, is never lost.
func (c *Controller) patchSetMetadata(ctx context.Context, set *nodesetv1alpha1.NodeSet, metadata map[string]any) (*nodesetv1alpha1.NodeSet, error) {
	patch := nodeutil.GuardedMergePatch(set.ResourceVersion, metadata, nil)
	return c.nodesetClient.NodesetV1alpha1().NodeSets(set.Namespace).Patch(ctx, set.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}

// creationLimit is how many more Nodes the class's limits allow this set,
// and when they bind, why.
func (c *Controller) creationLimit(res *resolution, set *nodesetv1alpha1.NodeSet) (int, string) {
	used, err := c.ClassUsage(res.class, set.Namespace, "")
	if err != nil {
		return 0, fmt.Sprintf("cannot count the nodes of NodeClass %q: %v", res.class.Name, err)
	}
	room, binding := plan.Room(res.class, set.Namespace, used)
	if binding == nil {
		return int(room), ""
	}
	return int(room), binding.String()
}

// ClassUsage is plan.CountUsage over this controller's view of a class
// (ClassCount), leaving out the NodeSet with key except ("" for none).
func (c *Controller) ClassUsage(class *nodesetv1alpha1.NodeClass, namespace, except string) (plan.Usage, error) {
	count, err := c.ClassCount(class)
	return count.Usage(namespace, except), err
}

// deleteOrphanedNodes deletes the Nodes of a NodeSet that is gone. The
// nodeset.dev/nodes finalizer holds a deleted NodeSet until its Nodes are
// gone, but whoever may update the NodeSet (its tenant) may take the
// finalizer off: its Nodes and machines would then run on, unmanaged,
// counting against the class's limits for every tenant. They are deleted
// as the finalizer would have had them deleted, drained by the node
// controller; the API server is asked first whether the set is gone, since
// the cache may not show a set made again under the name.
func (c *Controller) deleteOrphanedNodes(ctx context.Context, key, namespace, name string) error {
	nodes, err := c.setNodes(key)
	if err != nil {
		return err
	}
	var orphans []*corev1.Node
	for _, n := range nodes {
		if n.DeletionTimestamp == nil {
			orphans = append(orphans, n)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	if _, err := c.nodesetClient.NodesetV1alpha1().NodeSets(namespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return err // nil: it exists, and its own sync decides
	}
	return c.deleteNodesOfAGoneSet(ctx, key, orphans)
}

// ofClass splits a set's Nodes into those of its class and those of
// another: a set's class never changes, so a Node with its namespace and
// name and another class is of an earlier NodeSet of that name, deleted
// (without waiting for its Nodes) and made again with another class
// before this controller saw it go.
func ofClass(nodes []*corev1.Node, class string) (own, earlier []*corev1.Node) {
	for _, n := range nodes {
		if n.Labels[nodesetv1alpha1.LabelNodeClass] != class {
			if n.DeletionTimestamp == nil {
				earlier = append(earlier, n)
			}
			continue
		}
		own = append(own, n)
	}
	return own, earlier
}

// deleteNodesOfAGoneSet deletes Nodes of the NodeSet with key that is gone,
// as its finalizer would have had them deleted.
func (c *Controller) deleteNodesOfAGoneSet(ctx context.Context, key string, orphans []*corev1.Node) error {
	var errs []error
	for _, n := range orphans {
		errs = append(errs, c.writeNode(ctx, func() error {
			err := c.kubeClient.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
			switch {
			case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				return nil // gone, or another Node of the name now
			case err != nil:
				return err
			}
			c.recorder.Eventf(n, corev1.EventTypeWarning, ReasonNodeSetGone,
				"NodeSet %s is gone (deleted without waiting for its Nodes): its Node is deleted", key)
			klog.FromContext(ctx).Info("Deleted a Node of a NodeSet that is gone", "node", klog.KObj(n))
			return nil
		}))
	}
	return errors.Join(errs...)
}

// createNodes creates count Nodes in slow-start batches, with the expectations
// raised first so a lagging informer never leads to a second round.
func (c *Controller) createNodes(ctx context.Context, set *nodesetv1alpha1.NodeSet, res *resolution, key string, count int) error {
	logger := klog.FromContext(ctx)
	c.expectations.expectCreations(key, count)
	template := c.nodeTemplate(set, res)
	var unknown atomic.Int64
	created, err := slowStartBatch(count, slowStartInitialBatchSize, func() error {
		node := template.DeepCopy()
		node.Name = nodeName(set.Name)
		c.expectations.creating(key, node.Name)
		return guarded(ctx, func() error {
			return c.writeNode(ctx, func() error {
				newNode, err := c.kubeClient.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
				if err != nil {
					if outcomeUnknown(err) {
						c.expectations.createUnknown(key, node.Name)
						unknown.Add(1)
					} else {
						c.expectations.createFailed(key, node.Name)
					}
					return err
				}
				logger.V(2).Info("Created Node", "node", klog.KObj(newNode))
				return nil
			})
		})
	})
	// Creations never attempted or refused will not be observed; those of
	// unknown outcome are settled by a later sync (settleUnknownCreates).
	if settled := int64(count-created) - unknown.Load(); settled > 0 {
		for range settled {
			c.expectations.creationObserved(key)
		}
		// The room these held in the class's limits is free again.
		c.wakeLimited(res.class.Name, key)
	}
	if created > 0 {
		c.recorder.Eventf(set, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created %d node(s)", created)
	}
	if err != nil {
		// The API server names the Node it refused, with its random
		// suffix: said as is, every retry would be a new status message
		// and a new Event instead of one that counts up.
		err = &stableError{err: err, message: generatedName(set.Name).ReplaceAllString(err.Error(), nodeNamePrefix(set.Name)+"<random>")}
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating node: %v", err)
		return fmt.Errorf("creating nodes for %s: %w", key, err)
	}
	return nil
}

// generatedName matches the names generateName makes for the set's Nodes:
// the prefix and five characters of the API server's alphabet.
func generatedName(set string) *regexp.Regexp {
	return regexp.MustCompile(regexp.QuoteMeta(nodeNamePrefix(set)) + `[bcdfghjklmnpqrstvwxz2456789]{5}\b`)
}

// stableError is an error with its message made the same on every retry.
type stableError struct {
	err     error
	message string
}

func (e *stableError) Error() string { return e.message }
func (e *stableError) Unwrap() error { return e.err }

// nodeTemplate is a Node of the set as it is created: its name is
// <nodeset>-<5 random characters>, it carries the set's labels, annotations
// and taints, the startup taint and the termination finalizer, in one call.
func (c *Controller) nodeTemplate(set *nodesetv1alpha1.NodeSet, res *resolution) *corev1.Node {
	return resolve.NewNode(&res.effective, res.class.Name, set, res.templateHash)
}

// nodeName is a new name for a Node of the set, made as the API server's
// generateName makes one (the set's name and "-", cut to 58 characters,
// and five random characters of its alphabet), but here: a create whose
// answer is lost can then be looked up by the name it asked for.
func nodeName(set string) string {
	return nodeNamePrefix(set) + utilrand.String(5)
}

// nodeNamePrefix is what every new Node name of the set starts with: the
// set's name and "-", cut to maxGeneratedPrefix characters.
func nodeNamePrefix(set string) string {
	prefix := set + "-"
	if len(prefix) > maxGeneratedPrefix {
		prefix = prefix[:maxGeneratedPrefix]
	}
	return prefix
}

// maxGeneratedPrefix is the API server's: 63 characters in all, and the
// name is the machine's hostname.
const maxGeneratedPrefix = 58

// outcomeUnknown reports whether a failed create or delete may have been
// carried out all the same: its answer was lost (a transport error, the
// client's deadline), or the API server gave up waiting for storage (500,
// 504).
func outcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// unknownCreateSettle is how long after a create of unknown outcome the
// API server is asked whether it stored the Node: long enough that the
// request is no longer on its way.
const unknownCreateSettle = 5 * time.Second

// settleUnknownCreates asks the API server, by name, whether the set's
// creates of unknown outcome stored their Nodes. Until then they count as
// pending creations, so the set makes no second Node for one that was
// stored and its answer lost; one that was not stored is made again.
func (c *Controller) settleUnknownCreates(ctx context.Context, set *nodesetv1alpha1.NodeSet, key string) error {
	names, next := c.expectations.unknownCreates(key, unknownCreateSettle)
	if next > 0 {
		c.queue.AddAfter(key, next)
	}
	for _, name := range names {
		node, err := c.kubeClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.expectations.unknownSettled(key, name, false)
		case err != nil:
			return err
		default:
			ns, setName, _ := nodeutil.NodeSetOf(node.Labels)
			c.expectations.unknownSettled(key, name, ns == set.Namespace && setName == set.Name)
		}
	}
	return nil
}

// settleUnknownDeletes asks the API server, by name, whether the set's
// deletions of unknown outcome were carried out: the Node is gone, is
// another one now, or is terminating. One that was not is no longer
// expected, and the plan may choose it again.
func (c *Controller) settleUnknownDeletes(ctx context.Context, key string) error {
	due, next := c.expectations.unknownDeletions(key, unknownCreateSettle)
	if next > 0 {
		c.queue.AddAfter(key, next)
	}
	for name, d := range due {
		node, err := c.kubeClient.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.expectations.unknownDeleteSettled(key, name, true)
		case err != nil:
			return err
		default:
			c.expectations.unknownDeleteSettled(key, name, node.UID != d.uid || node.DeletionTimestamp != nil)
		}
	}
	return nil
}

func (c *Controller) deleteNodes(ctx context.Context, set *nodesetv1alpha1.NodeSet, key string, victims []*corev1.Node) error {
	logger := klog.FromContext(ctx)
	names := make([]string, 0, len(victims))
	for _, v := range victims {
		names = append(names, v.Name)
	}
	c.expectations.expectDeletions(key, names)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		deleted  []string
	)
	for _, victim := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := victim.UID
			err := guarded(ctx, func() error {
				return c.writeNode(ctx, func() error {
					return c.kubeClient.CoreV1().Nodes().Delete(ctx, victim.Name, metav1.DeleteOptions{
						Preconditions: &metav1.Preconditions{UID: &uid},
					})
				})
			})
			mu.Lock()
			defer mu.Unlock()
			if apierrors.IsNotFound(err) {
				// Gone already: its deletion may have been observed before
				// it was expected, and would then never be again.
				c.expectations.deletionObserved(key, victim.Name)
			}
			if err != nil && !apierrors.IsNotFound(err) {
				if outcomeUnknown(err) {
					// It may be going all the same: still expected until a
					// look settles it, so no second victim is picked.
					c.expectations.deleteUnknown(key, victim.Name, uid)
				} else {
					c.expectations.deletionObserved(key, victim.Name)
				}
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			deleted = append(deleted, victim.Name)
			logger.V(2).Info("Deleted Node", "node", klog.KObj(victim))
		}()
	}
	wg.Wait()
	if len(deleted) > 0 {
		n, listed := nodeutil.NameList(deleted)
		c.recorder.Eventf(set, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted %d node(s): %s", n, listed)
	}
	if firstErr != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting node: %v", firstErr)
		return fmt.Errorf("deleting nodes of %s: %w", key, firstErr)
	}
	return nil
}

// finalize deletes every Node of a deleted NodeSet and removes the set's
// finalizer once they are all gone, machines included. The Nodes go also
// when the finalizer is no longer there: whoever may update the set (its
// tenant) may have swapped it for one of their own, which keeps the set,
// deleted, for as long as they like, and a deleted set's Nodes would run
// on with no sync acting for them.
func (c *Controller) finalize(ctx context.Context, set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node) error {
	key := set.Namespace + "/" + set.Name
	if active := plan.Active(nodes); len(active) > 0 {
		// Every Node goes, so an unobserved write elsewhere in the set
		// holds nothing back (a Node its cloud group made meanwhile would
		// otherwise wait for an event that may not come); only the Nodes
		// whose deletion was issued and not yet seen are not asked again.
		var victims []*corev1.Node
		for _, n := range active {
			if !c.expectations.deleting(key, n.Name) {
				victims = append(victims, n)
			}
		}
		if len(victims) == 0 {
			return nil
		}
		return c.deleteNodes(ctx, set, key, victims)
	}
	if len(nodes) > 0 {
		// Terminating: the node controller is draining and deprovisioning them.
		return nil
	}
	if !slices.Contains(set.Finalizers, FinalizerNodes) {
		return nil
	}
	_, err := c.patchSetMetadata(ctx, set, map[string]any{"finalizers": nodeutil.WithoutString(set.Finalizers, FinalizerNodes)})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// slowStartBatch calls fn count times in batches that start at initial and
// double after each fully successful batch; it stops at the first batch with
// an error and returns how many calls succeeded.
func slowStartBatch(count, initial int, fn func() error) (int, error) {
	remaining := count
	successes := 0
	for batch := min(remaining, initial); batch > 0; batch = min(2*batch, remaining) {
		errs := make(chan error, batch)
		var wg sync.WaitGroup
		for range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		successes += batch - len(errs)
		if err, failed := <-errs; failed {
			return successes, err
		}
		remaining -= batch
	}
	return successes, nil
}
