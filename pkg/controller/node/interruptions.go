package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
)

// Event reasons of interruptions, on the Node and its NodeSet.
const (
	ReasonInterrupted              = "Interrupted"
	ReasonRebalanceRecommended     = "RebalanceRecommended"
	ReasonLifecycleActionCompleted = "LifecycleActionCompleted"
	ReasonInterruptedDrainCut      = "InterruptedDrainCut"
	ReasonInterruptionQueueFailed  = "InterruptionQueueFailed"
)

// machineIDIndex indexes Nodes by the last element of spec.providerID (the
// cloud's id of the machine, as interruption notices name it), and those
// with no providerID yet under noProviderID.
const machineIDIndex = "machineID"

// noProviderID is the machineIDIndex key of the Nodes without
// spec.providerID: a kubelet run with an external cloud provider registers
// its Node without one, and the cloud controller manager sets it later. No
// machine id is empty (path.Base never gives "").
const noProviderID = ""

func indexByMachineID(obj any) ([]string, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil
	}
	if node.Spec.ProviderID == "" {
		return []string{noProviderID}, nil
	}
	return []string{path.Base(node.Spec.ProviderID)}, nil
}

// interruptionRecord is what a Node's nodeset.dev/interruption annotation
// holds: the first notice, the earliest deadline, and the lifecycle action
// to complete once drained.
type interruptionRecord struct {
	Kind      drivers.InterruptionKind `json:"kind"`
	Notice    time.Time                `json:"notice"`
	Deadline  *time.Time               `json:"deadline,omitempty"`
	Lifecycle *drivers.LifecycleAction `json:"lifecycle,omitempty"`
}

// interruptionOf is the Node's record, if any.
func interruptionOf(node *corev1.Node) (interruptionRecord, bool) {
	var rec interruptionRecord
	raw := node.Annotations[nodesetv1alpha1.AnnotationInterruption]
	if raw == "" || json.Unmarshal([]byte(raw), &rec) != nil {
		return interruptionRecord{}, false
	}
	return rec, true
}

// merged is the record with notice n added: the first kind and notice, the
// earliest deadline, and a lifecycle action once there is one.
func (rec interruptionRecord) merged(n drivers.Interruption) interruptionRecord {
	out := rec
	if out.Kind == "" {
		out.Kind, out.Notice = n.Kind, n.Notice
	}
	if !n.Deadline.IsZero() && (out.Deadline == nil || n.Deadline.Before(*out.Deadline)) {
		deadline := n.Deadline.UTC()
		out.Deadline = &deadline
	}
	if out.Lifecycle == nil && n.Lifecycle != nil {
		action := *n.Lifecycle
		out.Lifecycle = &action
	}
	return out
}

// capped is the drain policy for an interrupted Node whose drain started at
// started: never past the deadline (a lifecycle action's deadline is its
// class's maxDrainTime, which may be longer than the drain timeout), and the
// machine is let go when it is reached, since AWS takes it anyway.
func (rec interruptionRecord) capped(policy drainPolicy, started time.Time) drainPolicy {
	policy.onTimeout = nodesetv1alpha1.DrainTimeoutDeprovision
	if rec.Deadline == nil {
		return policy
	}
	left := rec.Deadline.Sub(started)
	if rec.Lifecycle != nil {
		policy.timeout = left
	} else {
		policy.timeout = min(policy.timeout, left)
	}
	return policy
}

// runInterruptions runs one consumer per interruption queue the served
// classes name, until ctx is done, and acts on the notices kept for
// machines whose Nodes had not appeared yet. Only a leader runs it.
func (c *Controller) runInterruptions(ctx context.Context) {
	early := newEarlyWarnings(maxEarlyWarnings)
	go wait.UntilWithContext(ctx, func(ctx context.Context) { c.actOnEarlyWarnings(ctx, early) }, earlyWarningPoll)
	running := map[string]context.CancelFunc{}
	defer func() {
		for _, stop := range running {
			stop()
		}
	}()
	wait.Until(func() {
		want := c.interruptionQueues()
		for key, stop := range running {
			if _, ok := want[key]; !ok {
				stop()
				delete(running, key)
			}
		}
		for key, className := range want {
			if _, ok := running[key]; ok {
				continue
			}
			queueCtx, stop := context.WithCancel(ctx)
			running[key] = stop
			go c.consumeInterruptions(queueCtx, key, className, early)
		}
	}, 5*time.Second, ctx.Done())
}

// interruptionQueues are the queues of the served classes, by driver, queue
// and credentials, each with the name of one class that names it.
func (c *Controller) interruptionQueues() map[string]string {
	out := map[string]string{}
	classes, err := c.classes.List(labels.Everything())
	if err != nil {
		return out
	}
	slices.SortFunc(classes, func(a, b *nodesetv1alpha1.NodeClass) int { return cmpString(a.Name, b.Name) })
	for _, class := range classes {
		source, ok := c.registry[class.Spec.Driver].(drivers.InterruptionSource)
		if !ok || class.DeletionTimestamp != nil {
			continue
		}
		key := queueKey(source, class)
		if key == "" {
			continue
		}
		if _, ok := out[key]; !ok {
			out[key] = class.Name
		}
	}
	return out
}

// queueName is the class's interruption queue as its notices are scoped:
// its driver and queue, without the credentials; "" when it names none. A
// notice received on it acts only on the Nodes and groups of the classes
// that name it (readsQueue). Classes naming one queue with different
// credentials are read by two consumers, and SQS gives each message to
// one of them: a notice either receives is for the Nodes of both.
func queueName(source drivers.InterruptionSource, class *nodesetv1alpha1.NodeClass) string {
	queue := source.InterruptionQueue(drivers.Class{Name: class.Name, Spec: class.Spec})
	if queue == "" {
		return ""
	}
	return class.Spec.Driver + " " + queue
}

// queueKey is the key of the class's interruption queue: its driver,
// queue and credentials; "" when it names none.
func queueKey(source drivers.InterruptionSource, class *nodesetv1alpha1.NodeClass) string {
	key := queueName(source, class)
	if key == "" {
		return ""
	}
	if ref := class.Spec.CredentialsSecretRef; ref != nil {
		key += " " + ref.Namespace + "/" + ref.Name
	}
	return key
}

// readsQueue reports whether class names queue (a queueName): whether a
// notice received on queue may act on the class's Nodes and groups. A
// class of no known interruption source reads none.
func (c *Controller) readsQueue(class *nodesetv1alpha1.NodeClass, queue string) bool {
	if class == nil || queue == "" {
		return false
	}
	source, ok := c.registry[class.Spec.Driver].(drivers.InterruptionSource)
	return ok && queueName(source, class) == queue
}

// tellQueueFailed reports, on every served class read through the same
// queue as class, that the queue cannot be read or its messages deleted
// (deleted, permissions revoked, a key it cannot use), which a log line
// alone would not tell its admin.
func (c *Controller) tellQueueFailed(source drivers.InterruptionSource, class *nodesetv1alpha1.NodeClass, what, consequence string, err error) {
	key := queueKey(source, class)
	classes, listErr := c.classes.List(labels.Everything())
	if key == "" || listErr != nil {
		return
	}
	queue := source.InterruptionQueue(drivers.Class{Name: class.Name, Spec: class.Spec})
	for _, other := range classes {
		if other.DeletionTimestamp != nil || other.Spec.Driver != class.Spec.Driver || queueKey(source, other) != key {
			continue
		}
		c.recorder.Eventf(other, corev1.EventTypeWarning, ReasonInterruptionQueueFailed,
			"%s interruption queue %s failed (%s): %s", what, queue, consequence, c.scrub(err.Error()))
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// consumeInterruptions receives the notices of one queue, acts on each and
// acknowledges it once its action is recorded, or kept in early for a Node
// not there yet (at least once: a notice whose action failed comes again).
func (c *Controller) consumeInterruptions(ctx context.Context, key, className string, early *earlyWarnings) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "queue", key)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Consuming interruption notices")
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: time.Minute}
	for ctx.Err() == nil {
		switch c.consumeOnce(ctx, className, early) {
		case consumeStop:
			return // the queue list goes on without it
		case consumeFailed:
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Step()):
			}
		case consumeOK:
			backoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: time.Minute}
		}
	}
}

type consumeOutcome int

const (
	consumeOK consumeOutcome = iota
	consumeFailed
	consumeStop
)

// consumeOnce receives one batch of notices from the queue of the named
// class, acts on each (or keeps it in early) and acknowledges those acted
// on. A driver's panic is a failed round, retried with backoff, not the
// end of the process.
func (c *Controller) consumeOnce(ctx context.Context, className string, early *earlyWarnings) (outcome consumeOutcome) {
	logger := klog.FromContext(ctx)
	defer func() {
		if r := recover(); r != nil {
			_ = c.panicked(ctx, r, "consuming interruption notices") // logged; the round is retried with backoff
			outcome = consumeFailed
		}
	}()
	class, err := c.classes.Get(className)
	if err != nil {
		return consumeStop
	}
	source, ok := c.registry[class.Spec.Driver].(drivers.InterruptionSource)
	if !ok {
		return consumeStop
	}
	queue := queueName(source, class)
	if queue == "" {
		// The class names no queue now: its consumer is stopped at the
		// next look at the classes.
		return consumeFailed
	}
	if err := c.mayAct(opReceiveInterruptions); err != nil {
		return consumeFailed
	}
	credentials, err := c.credentials(ctx, class)
	if err != nil {
		logger.Error(nil, "Cannot read the credentials of the interruption queue", "nodeclass", class.Name, "err", c.scrub(err.Error()))
		return consumeFailed
	}
	queueClass := drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: credentials}
	notices, err := source.ReceiveInterruptions(ctx, queueClass)
	if err != nil {
		if ctx.Err() == nil {
			logger.Error(nil, "Receiving interruption notices failed", "err", c.scrub(err.Error()))
			c.tellQueueFailed(source, class, "Receiving from the",
				"retried with backoff; until it works, no notice drains a Node before AWS takes its instance", err)
		}
		return consumeFailed
	}
	var handled []string
	for _, n := range notices {
		err := c.handleInterruption(ctx, class.Spec.Driver, queue, n, early)
		if errors.Is(err, errUntilReleased) {
			logger.V(2).Info("Interruption notice kept until its Node is released", "id", n.ID, "kind", n.Kind)
			continue
		}
		if errors.Is(err, errDrainingFirst) {
			logger.V(2).Info("Interruption notice kept until its Node is drained", "id", n.ID, "kind", n.Kind)
			c.redeliverSooner(ctx, source, queueClass, n, err)
			continue
		}
		if errors.Is(err, errKeptEarly) {
			continue // it comes again, to whoever leads then
		}
		if err != nil {
			logger.Error(nil, "Acting on an interruption notice failed; it comes again", "id", n.ID, "kind", n.Kind, "err", c.scrub(err.Error()))
			continue
		}
		handled = append(handled, n.Receipt)
	}
	if len(handled) == 0 {
		return consumeOK
	}
	if err := c.mayAct(opAckInterruptions); err != nil {
		return consumeOK // they come again, to whoever leads
	}
	if err := source.AckInterruptions(ctx, queueClass, handled); err != nil {
		logger.Error(nil, "Acknowledging interruption notices failed; they come again", "err", c.scrub(err.Error()))
		if ctx.Err() == nil {
			c.tellQueueFailed(source, class, "Deleting handled messages from the",
				"they come again and are acted on again, changing nothing", err)
		}
	}
	return consumeOK
}

// redeliverSooner has the message of notice n, whose drain goes on
// through its deliveries (err is a drainingFirst), come again within the
// time its lifecycle action's next heartbeat needs, when the source can
// do that. Otherwise, or when the call fails, it comes again after the
// queue's visibility timeout, as any notice not acknowledged.
func (c *Controller) redeliverSooner(ctx context.Context, source drivers.InterruptionSource, queueClass drivers.Class, n drivers.Interruption, err error) {
	var draining drainingFirst
	redelivery, ok := source.(drivers.InterruptionRedelivery)
	if !ok || !errors.As(err, &draining) || draining.within <= 0 || n.Receipt == "" {
		return
	}
	if err := c.mayAct(opAckInterruptions); err != nil {
		return
	}
	if err := redelivery.RedeliverInterruption(ctx, queueClass, n.Receipt, draining.within); err != nil {
		klog.FromContext(ctx).Error(nil, "Could not have a notice of a draining Node come again sooner; it comes again after the queue's visibility timeout",
			"id", n.ID, "err", c.scrub(err.Error()))
	}
}

// errUntilReleased is the answer for a lifecycle notice whose Node was
// already being deleted when the notice was recorded on it: the sync that
// releases the Node may have read it before the record (the release tests
// only the Node's UID and finalizer), and would let it go without
// completing the action. The notice stays on its queue, and once it comes
// again to find the Node released or gone, the action is completed then
// (completing it twice is no error).
var errUntilReleased = errors.New("lifecycle action recorded on a Node being deleted: the notice is kept until the Node is released")

// handleInterruption records what notice n, received on queue (a
// queueName) of driver, means for each of its machines' Nodes: nil once
// every action is recorded (or there is none to take), errUntilReleased or
// errKeptEarly when the notice is to come again. Only the driver's own
// Nodes of the classes that read queue are acted on: an EKS managed node
// group's instance in a shared queue is EKS's to drain, another Node with
// the same machine id (a kubelet's own, another driver's) is passed over,
// and whoever may send to one queue drains no Node of a class that does
// not read it. A machine with no such Node yet has the notice kept in
// early (when not nil) until its Node appears or the notice expires; its
// message comes again meanwhile.
func (c *Controller) handleInterruption(ctx context.Context, driver, queue string, n drivers.Interruption, early *earlyWarnings) error {
	logger := klog.FromContext(ctx)
	if n.Kind == drivers.InterruptionUnparseable {
		c.metrics.interruptionUnparseable()
		logger.Info("Dropped an interruption message that cannot be read", "id", n.ID, "reason", c.scrub(n.Detail))
		return nil
	}
	var errs []error
	kept, keptEarly, draining, repeats := false, false, false, 0
	var within time.Duration // the soonest a draining machine's notice must come again
	for _, id := range n.MachineIDs {
		node := c.nodeOfMachine(driver, queue, id)
		if node == nil {
			repeat, err := c.machineWithoutNode(ctx, early, driver, queue, n, id)
			if repeat {
				repeats++
			}
			if errors.Is(err, errKeptEarly) {
				keptEarly = true
				continue
			}
			if errors.Is(err, errDrainingFirst) {
				draining = true
				var d drainingFirst
				if errors.As(err, &d) && d.within > 0 && (within == 0 || d.within < within) {
					within = d.within
				}
				continue
			}
			errs = append(errs, err)
			continue
		}
		logger := klog.LoggerWithValues(logger, "node", node.Name, "machine", id, "kind", n.Kind)
		ctx := klog.NewContext(ctx, logger)
		err := c.actOn(ctx, driver, queue, node, n)
		if errors.Is(err, errUntilReleased) {
			kept = true
			continue
		}
		errs = append(errs, err)
	}
	if len(n.MachineIDs) > 0 && repeats < len(n.MachineIDs) && (early == nil || early.counts(n, c.opts.Now())) {
		// Not counted again when its message comes again while it is
		// kept for its Node, or after it was acted on; nor at all when it
		// names no machine to act on (an instance that is pending or
		// running, a scheduled change that is over or not about EC2).
		c.metrics.interruptionReceived(n.Kind)
	}
	switch err := errors.Join(errs...); {
	case err != nil:
		return err
	case kept:
		return errUntilReleased
	case draining:
		return drainingFirst{within: within}
	case keptEarly:
		return errKeptEarly
	}
	return nil
}

// actOn does what notice n, received on queue, asks of the Node of its
// machine: a rebalance recommendation taints the Node (or has it replaced
// first), any other notice drains it.
func (c *Controller) actOn(ctx context.Context, driver, queue string, node *corev1.Node, n drivers.Interruption) error {
	if n.Kind == drivers.InterruptionRebalance {
		return c.rebalance(ctx, node, n)
	}
	return c.interrupt(ctx, queue, node.Name, c.byOwnClass(driver, node, n))
}

// byOwnClass is notice n with a lifecycle action's heartbeat timeout and
// deadline set by the class of the machine's Node: the queue may be shared
// by classes of other heartbeat and drain times, and the notice was read
// with one of them (a hook whose timeout could not be read then is timed
// by the Node's class, not the queue's).
func (c *Controller) byOwnClass(driver string, node *corev1.Node, n drivers.Interruption) drivers.Interruption {
	if n.Lifecycle == nil {
		return n
	}
	source, ok := c.registry[driver].(drivers.InterruptionSource)
	if !ok {
		return n
	}
	class, err := c.classes.Get(node.Labels[nodesetv1alpha1.LabelNodeClass])
	if err != nil {
		return n
	}
	return timedBy(source, class, n)
}

// timedBy is notice n, of a lifecycle action, with its heartbeat timeout
// and deadline set by class.
func timedBy(source drivers.InterruptionSource, class *nodesetv1alpha1.NodeClass, n drivers.Interruption) drivers.Interruption {
	own := drivers.Class{Name: class.Name, Spec: class.Spec}
	action := *n.Lifecycle
	action.HeartbeatTimeout = source.LifecycleHeartbeatTimeout(own, action.HeartbeatTimeout)
	n.Lifecycle = &action
	n.Deadline = source.LifecycleDeadline(own, n.Notice, action.HeartbeatTimeout)
	return n
}

// machineWithoutNode handles a notice, received on queue, for a machine no
// Node of a NodeSet of a class that reads queue has: a lifecycle action of
// one of the groups of those classes is completed at once when no Node at
// all has the machine (its Node already drained and gone, or never made),
// and only after the drain of the one there is otherwise (a kubelet's own
// Node, not adopted yet: pods may run on it); a warning that still means
// something is kept in early for a Node that may yet appear; anything else
// is not ours. It reports whether the notice is one kept or acted on
// already, come again.
func (c *Controller) machineWithoutNode(ctx context.Context, early *earlyWarnings, driver, queue string, n drivers.Interruption, id string) (repeat bool, err error) {
	if n.Lifecycle != nil {
		if c.ownGroup(n.Lifecycle.Group, queue) {
			if c.anyNodeOfMachine(id) || c.anyNodeOfMachine(noProviderID) {
				return false, c.drainBeforeCompleting(ctx, queue, n, id)
			}
			return false, c.interruptedNodeGone(ctx, queue, n)
		}
	} else {
		switch c.keepEarly(ctx, early, driver, queue, id, n) {
		case earlyKept:
			return false, errKeptEarly
		case earlyKeptAgain:
			return true, errKeptEarly
		case earlyActedOn:
			return true, nil
		}
	}
	c.metrics.interruptionUnknown()
	klog.FromContext(ctx).V(2).Info("Interruption notice for a machine of no NodeSet; ignored", "machine", id, "kind", n.Kind)
	return false, nil
}

// ownGroup reports whether a NodeSet this controller serves has the cloud
// group group, of a driver that handles interruptions (an EKS managed node
// group's lifecycle actions are EKS's), and of a class that reads queue: a
// notice on one queue completes no lifecycle action of another class's
// group.
func (c *Controller) ownGroup(group, queue string) bool {
	_, _, _, ok := c.groupSource(group, queue)
	return ok
}

// completeLifecycleAction lets the cloud terminate a machine it waits for.
// node, when set, is told.
func (c *Controller) completeLifecycleAction(ctx context.Context, source drivers.InterruptionSource, class drivers.Class, action drivers.LifecycleAction, node *corev1.Node) error {
	if err := c.mayAct(opCompleteLifecycle); err != nil {
		return err
	}
	start := c.opts.Now()
	err := source.CompleteLifecycleAction(ctx, class, action)
	c.metrics.driverCall(c.driverName(source), opCompleteLifecycle, start, err)
	if err != nil {
		return err
	}
	c.metrics.lifecycleCompleted()
	klog.FromContext(ctx).V(2).Info("Completed the lifecycle action: the instance goes on terminating", "machine", action.MachineID, "group", action.Group)
	if node != nil {
		c.recorder.Eventf(node, corev1.EventTypeNormal, ReasonLifecycleActionCompleted,
			"Drained; lifecycle action %s of group %s completed with CONTINUE", action.Hook, action.Group)
	}
	return nil
}

func (c *Controller) driverName(d any) string {
	if named, ok := d.(drivers.Driver); ok {
		return named.Name()
	}
	return ""
}

// interrupt records the notice, received on queue, on the Node and deletes
// it: the deletion path drains it within the notice's deadline and lets
// the machine go. A Node that has the notice already, or is going already
// with it, is left as it is, so a notice that comes twice drains once. A
// lifecycle action recorded on a Node already being deleted is
// errUntilReleased until the Node is released.
func (c *Controller) interrupt(ctx context.Context, queue, name string, n drivers.Interruption) error {
	for attempt := 0; ; attempt++ {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if n.Lifecycle != nil {
				// Drained and gone between the look-up and now.
				return c.interruptedNodeGone(ctx, queue, n)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if n.Lifecycle != nil && n.Lifecycle.Group != node.Annotations[nodesetv1alpha1.AnnotationGroup] {
			// An Auto Scaling group never takes another's instance: an
			// action naming a group that is not the Node's is no action
			// of its machine (whoever may send to the queue wrote it). The
			// Node is drained for the notice; the action is not recorded,
			// so it is never completed for that group.
			klog.FromContext(ctx).Info("A lifecycle action names another group than the Node's; drained without completing it",
				"node", klog.KObj(node), "group", n.Lifecycle.Group, "nodeGroup", node.Annotations[nodesetv1alpha1.AnnotationGroup])
			n.Lifecycle = nil
		}
		old, had := interruptionOf(node)
		rec := old.merged(n)
		held := slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination)
		if had && recordsEqual(old, rec) {
			if node.DeletionTimestamp == nil {
				return c.deleteInterrupted(ctx, node)
			}
			if n.Lifecycle != nil && held {
				return errUntilReleased
			}
			return nil
		}
		if !held && node.DeletionTimestamp != nil {
			// Released already: its drain is over.
			if n.Lifecycle != nil {
				return c.interruptedNodeGone(ctx, queue, n)
			}
			return nil
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": node.ResourceVersion,
			"annotations":     map[string]string{nodesetv1alpha1.AnnotationInterruption: string(raw)}}})
		if err != nil {
			return err
		}
		updated, err := c.kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !had {
			c.tellInterruption(ctx, updated, rec, n)
		}
		if updated.DeletionTimestamp != nil {
			// Already going: its drain picks up the deadline and the
			// lifecycle action, unless its sync read the Node before this
			// write and is about to release it (a JSON patch that tests
			// only the UID and the finalizer): the notice then comes again
			// and completes the action once the Node is released.
			c.queue.Add(updated.Name)
			if n.Lifecycle != nil {
				return errUntilReleased
			}
			return nil
		}
		return c.deleteInterrupted(ctx, updated)
	}
}

// interruptedNodeGone completes the lifecycle action of a notice, received
// on queue, whose Node finished its drain and is gone; only for a group of
// a class that reads queue.
func (c *Controller) interruptedNodeGone(ctx context.Context, queue string, n drivers.Interruption) error {
	_, source, class, ok := c.groupSource(n.Lifecycle.Group, queue)
	if !ok {
		return nil
	}
	credentials, err := c.credentials(ctx, class)
	if err != nil {
		return err
	}
	return c.completeLifecycleAction(ctx, source, drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: credentials}, *n.Lifecycle, nil)
}

// groupSource is the group driver, interruption source and class of the
// NodeSet whose cloud group is group, when its class reads queue.
func (c *Controller) groupSource(group, queue string) (drivers.GroupDriver, drivers.InterruptionSource, *nodesetv1alpha1.NodeClass, bool) {
	sets, err := c.sets.List(labels.Everything())
	if err != nil {
		return nil, nil, nil, false
	}
	for _, set := range sets {
		if set.Status.Group == nil || set.Status.Group.Name != group {
			continue
		}
		class, driver, ok := c.groupOf(set)
		source, isSource := driver.(drivers.InterruptionSource)
		if !ok || !isSource || !c.readsQueue(class, queue) {
			return nil, nil, nil, false
		}
		return driver, source, class, true
	}
	return nil, nil, nil, false
}

// errDrainingFirst is the answer for a lifecycle notice whose machine has a
// Node that is none of a NodeSet's replicas, drained from the consumer: the
// notice comes again (after the queue's visibility timeout) for the next
// look at the drain, and its action is completed once the drain is over.
var errDrainingFirst = errors.New("lifecycle action of a machine whose Node is draining: the notice is kept until the drain is over")

// drainingFirst is errDrainingFirst with the time within which its notice
// must come again (0: the queue's visibility timeout will do): the notice's
// deliveries heartbeat the lifecycle action, and Auto Scaling lets the
// instance go once its hook's heartbeat timeout passes without one, a
// timeout that may be shorter than the queue's visibility timeout (30 s
// at the least, as PutLifecycleHook allows, against the node controller's
// --interruption-visibility-timeout). A heartbeat is sent once half the
// timeout has passed since the last; deliveries every quarter of it keep
// the time between two heartbeats under three quarters of it.
type drainingFirst struct{ within time.Duration }

func (drainingFirst) Error() string        { return errDrainingFirst.Error() }
func (drainingFirst) Is(target error) bool { return target == errDrainingFirst }

// anyNodeOfMachine reports whether a Node, whoever made it, has machine
// id in its providerID.
func (c *Controller) anyNodeOfMachine(id string) bool {
	objs, err := c.nodeIndexer.ByIndex(machineIDIndex, id)
	return err == nil && len(objs) > 0
}

// machineNode is the Node of the group's machine id as its kubelet
// registers it: the machine's providerID, and its name when the cloud gives
// one (ensureMachineNode adopts only such a one); or, with no providerID
// yet, the machine's name as the cloud gives it, or its id
// (nodeNamedByID). A kubelet run with an external cloud provider registers
// without spec.providerID (the cloud controller manager sets it later),
// named as EKS names its Nodes: the instance's private DNS name, which EC2
// describes (aws-node-termination-handler finds an instance's Node by that
// name too). The name comes from the cloud's description of the group's
// machine, never from the notice, and on EKS a kubelet may register only
// the Node of its own instance's private DNS name
// (system:node:{{EC2PrivateDNSName}} and NodeRestriction). nil when there
// is none, or the machine is not the group's.
func (c *Controller) machineNode(status drivers.GroupStatus, id string) *corev1.Node {
	for _, m := range status.Machines {
		if path.Base(m.ProviderID) != id {
			continue
		}
		for _, node := range c.nodesOfProviderID(m.ProviderID) {
			if m.Name == "" || node.Name == m.Name {
				return node
			}
		}
		if m.Name != "" {
			if obj, ok, err := c.nodeIndexer.GetByKey(m.Name); err == nil && ok {
				if node, ok := obj.(*corev1.Node); ok && node.Spec.ProviderID == "" {
					return node
				}
			}
		}
		if node := c.nodeNamedByID(id); node != nil {
			return node
		}
	}
	return nil
}

// nodeNamedByID is the Node without providerID named by machine id, as
// EC2's resource-based hostnames name an instance: the id alone (as kops
// and the AWS cloud controller manager set it) or the id's host name
// (i-0123456789abcdef0.eu-west-1.compute.internal, as EKS's bootstrap
// does). The AWS cloud controller manager reads an instance id from such a
// name the same way (the name up to its first dot, when it starts with
// "i-"), and EC2 describes such an instance's private DNS name with its
// region's domain or the VPC's own, so the name cannot be matched whole.
// nil when there is none.
func (c *Controller) nodeNamedByID(id string) *corev1.Node {
	objs, err := c.nodeIndexer.ByIndex(machineIDIndex, noProviderID)
	if err != nil {
		return nil
	}
	for _, obj := range objs {
		node, ok := obj.(*corev1.Node)
		if ok && node.Spec.ProviderID == "" && (node.Name == id || strings.HasPrefix(node.Name, id+".")) {
			return node
		}
	}
	return nil
}

// nodesOfProviderID are the Nodes whose spec.providerID is providerID, by
// name.
func (c *Controller) nodesOfProviderID(providerID string) []*corev1.Node {
	objs, err := c.nodeIndexer.ByIndex(providerIDIndex, providerID)
	if err != nil {
		return nil
	}
	var nodes []*corev1.Node
	for _, obj := range objs {
		if node, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, node)
		}
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return cmpString(a.Name, b.Name) })
	return nodes
}

// drainBeforeCompleting handles lifecycle notice n (received on queue) of
// a machine id that has a Node, but none of a NodeSet's replicas: a
// kubelet registered it and the group's sync has not adopted it, which it
// never does for an instance that is terminating. Pods may run on it, so
// the action is completed only after its drain, and a deletion of a Node
// nodeset does not hold would take it away undrained. Each delivery of
// the notice cordons the Node, evicts its pods and keeps the action
// waiting (errDrainingFirst); the one that finds it drained, gone, or past
// the deadline of the group's class completes the action. The notice's
// word alone drains no Node: the machine must be the group's as the cloud
// describes it, and the Node the one its kubelet registered for it (its
// providerID and name); otherwise the action is completed at once, as for
// a machine with no Node.
func (c *Controller) drainBeforeCompleting(ctx context.Context, queue string, n drivers.Interruption, id string) error {
	driver, source, class, ok := c.groupSource(n.Lifecycle.Group, queue)
	if !ok {
		return nil
	}
	if err := c.mayAct(opCompleteLifecycle); err != nil {
		return err
	}
	credentials, err := c.credentials(ctx, class)
	if err != nil {
		return err
	}
	groupClass := drivers.Class{Name: class.Name, Spec: class.Spec, Credentials: credentials}
	start := c.opts.Now()
	status, err := driver.DescribeGroup(ctx, groupClass, n.Lifecycle.Group)
	c.metrics.driverCall(driver.Name(), opDescribeGroup, start, err)
	if err != nil && !errors.Is(err, drivers.ErrNotFound) {
		return err
	}
	cached := c.machineNode(status, id)
	if cached == nil {
		return c.completeLifecycleAction(ctx, source, groupClass, *n.Lifecycle, nil)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", cached.Name, "machine", id)
	ctx = klog.NewContext(ctx, logger)
	n = timedBy(source, class, n)
	rec := interruptionRecord{}.merged(n)
	// Read from the API server: the cache may not have this drain's last
	// write yet, on which the cordon's patch is conditioned.
	node, err := c.kube.CoreV1().Nodes().Get(ctx, cached.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && (node.UID != cached.UID ||
		(node.Spec.ProviderID != "" && path.Base(node.Spec.ProviderID) != id))) {
		// Gone, another Node of the name, or given another machine's
		// providerID since.
		return c.completeLifecycleAction(ctx, source, groupClass, *n.Lifecycle, nil)
	}
	if err != nil {
		return err
	}
	node, started, _, err := c.cordon(ctx, node)
	if err != nil {
		return err
	}
	done, err := c.drain(ctx, node, rec.capped(drainPolicyOf(class), started), started)
	if err != nil {
		return err
	}
	if !done {
		if err := c.lifecycleHeartbeat(ctx, node, rec, source, groupClass); err != nil {
			return err
		}
		logger.V(2).Info("Draining a Node that is no NodeSet's replica before completing its machine's lifecycle action")
		return drainingFirst{within: rec.Lifecycle.HeartbeatTimeout / 4}
	}
	return c.completeLifecycleAction(ctx, source, groupClass, *n.Lifecycle, node)
}

func recordsEqual(a, b interruptionRecord) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// deleteInterrupted deletes an interrupted Node (this very Node: a UID
// precondition). Its NodeSet's replicas stay as they are, so the group is
// raised again once the machine is gone and a replacement comes up.
func (c *Controller) deleteInterrupted(ctx context.Context, node *corev1.Node) error {
	uid := node.UID
	err := c.kube.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// tellInterruption reports a new notice on the Node and its NodeSet.
func (c *Controller) tellInterruption(ctx context.Context, node *corev1.Node, rec interruptionRecord, n drivers.Interruption) {
	when := "now"
	if rec.Deadline != nil {
		when = "before " + rec.Deadline.UTC().Format(time.RFC3339)
	}
	msg := fmt.Sprintf("%s for machine %s: draining %s", n.Kind, path.Base(node.Spec.ProviderID), when)
	if n.Detail != "" {
		msg = fmt.Sprintf("%s (%s) for machine %s: draining %s", n.Kind, n.Detail, path.Base(node.Spec.ProviderID), when)
	}
	c.recorder.Event(node, corev1.EventTypeWarning, ReasonInterrupted, msg)
	c.tellSet(node, corev1.EventTypeWarning, ReasonInterrupted, msg)
	klog.FromContext(ctx).Info("Interruption notice; draining the Node", "deadline", when)
}

// rebalance acts on a rebalance recommendation by the class's policy: a
// PreferNoSchedule taint (Taint), or also the replace annotation, which
// raises the group by one and deletes the Node once the replacement is
// Ready (ReplaceFirst).
func (c *Controller) rebalance(ctx context.Context, cached *corev1.Node, n drivers.Interruption) error {
	class, err := c.classes.Get(cached.Labels[nodesetv1alpha1.LabelNodeClass])
	if err != nil {
		return client404(err)
	}
	replaceFirst := false
	if s := class.Spec.EKSAutoscalingGroup; s != nil && s.Interruptions != nil {
		replaceFirst = s.Interruptions.Rebalance == nodesetv1alpha1.RebalanceReplaceFirst
	}
	msg := fmt.Sprintf("Rebalance recommendation for machine %s: tainted %s:PreferNoSchedule", path.Base(cached.Spec.ProviderID), nodesetv1alpha1.TaintRebalanceRecommended)
	if replaceFirst {
		msg += "; a replacement comes up first, then this Node is drained"
	}
	var updated *corev1.Node
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, cached.Name, metav1.GetOptions{})
		if err != nil || node.DeletionTimestamp != nil {
			return err // gone or going anyway
		}
		tainted := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == nodesetv1alpha1.TaintRebalanceRecommended })
		marked := node.Annotations[nodesetv1alpha1.AnnotationReplace] != ""
		if tainted && (marked || !replaceFirst) {
			return nil // told before
		}
		if !tainted {
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: nodesetv1alpha1.TaintRebalanceRecommended, Value: "true", Effect: corev1.TaintEffectPreferNoSchedule})
		}
		if replaceFirst {
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[nodesetv1alpha1.AnnotationReplace] = n.Notice.UTC().Format(time.RFC3339)
		}
		updated, err = c.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil || updated == nil {
		return client404(err)
	}
	c.recorder.Event(updated, corev1.EventTypeNormal, ReasonRebalanceRecommended, msg)
	if set := c.tellSet(updated, corev1.EventTypeNormal, ReasonRebalanceRecommended, msg); set != nil && replaceFirst {
		c.groups.Add(set.Namespace + "/" + set.Name)
	}
	return nil
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// replaceWhenReplaced deletes a Node marked for replacement once its
// NodeSet has its replicas Ready without it.
func (c *Controller) replaceWhenReplaced(ctx context.Context, node *corev1.Node) error {
	ns, name, ok := nodeutil.NodeSetOf(node.Labels)
	if !ok {
		return nil
	}
	set, err := c.sets.NodeSets(ns).Get(name)
	if err != nil {
		return client404(err)
	}
	nodes, err := c.nodes.List(labels.SelectorFromSet(labels.Set{nodesetv1alpha1.LabelNodeSetNamespace: ns, nodesetv1alpha1.LabelNodeSet: name}))
	if err != nil {
		return err
	}
	ready := 0
	for _, n := range plan.Staying(nodes) {
		if nodeutil.IsReady(n) && !nodeutil.HasStartupTaint(n) {
			ready++
		}
	}
	if ready < int(plan.Replicas(set)) {
		c.queue.AddAfter(node.Name, 2*time.Second)
		return nil
	}
	klog.FromContext(ctx).Info("Replacement is Ready; draining the Node a rebalance recommendation marked")
	return c.deleteInterrupted(ctx, node)
}

// interruptionDrainEnded records, once, how an interrupted Node's drain
// ended: the time from notice to drained, or a drain cut short by the
// deadline.
func (c *Controller) interruptionDrainEnded(node *corev1.Node, rec interruptionRecord) {
	if cond := c.drainConditionOf(node); cond != nil && cond.Reason == ReasonDrainTimedOut {
		c.metrics.interruptionDrainCut()
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonInterruptedDrainCut,
			"The drain did not finish before the %s deadline; the machine goes with pods still on it", rec.Kind)
		return
	}
	c.metrics.interruptionDrained(c.opts.Now().Sub(rec.Notice))
}

// lifecycleHeartbeat keeps a lifecycle action waiting while its Node
// drains: a heartbeat every half heartbeat timeout.
func (c *Controller) lifecycleHeartbeat(ctx context.Context, node *corev1.Node, rec interruptionRecord, source drivers.InterruptionSource, class drivers.Class) error {
	action := rec.Lifecycle
	if action == nil || action.HeartbeatTimeout <= 0 {
		return nil
	}
	last, ok := c.heartbeats.get(node)
	if !ok {
		last = rec.Notice
	}
	if c.opts.Now().Sub(last) < action.HeartbeatTimeout/2 {
		return nil
	}
	if err := c.mayAct(opLifecycleHeartbeat); err != nil {
		return err
	}
	start := c.opts.Now()
	err := source.RecordLifecycleHeartbeat(ctx, class, *action)
	c.metrics.driverCall(c.driverName(source), opLifecycleHeartbeat, start, err)
	if err != nil {
		return err
	}
	c.heartbeats.set(node, c.opts.Now())
	return nil
}

// nodeOfMachine is the Node a NodeSet has for machine id of driver's
// groups, of a class that reads queue (a queueName), nil when there is
// none. A Node whose class is gone is tied to no queue, and is not acted
// on. Every Node with the id is looked at: another one may share it (a
// kubelet's own Node, another driver's), and the index gives them in no
// set order. Only one of a set's replicas (nodeutil.Replica: held, no
// stranger), with labels that are not tampered with, is the set's: a
// kubelet may register its own Node with any providerID, a set's labels
// and the group's annotations, and a notice taken to it would leave the
// set's own Node undrained.
func (c *Controller) nodeOfMachine(driver, queue, id string) *corev1.Node {
	objs, err := c.nodeIndexer.ByIndex(machineIDIndex, id)
	if err != nil {
		return nil
	}
	var ours []*corev1.Node
	now := c.opts.Now()
	for _, obj := range objs {
		node, ok := obj.(*corev1.Node)
		if !ok || node.Labels[nodesetv1alpha1.LabelNodeSet] == "" || node.Annotations[nodesetv1alpha1.AnnotationGroup] == "" ||
			node.Annotations[nodesetv1alpha1.AnnotationDriver] != driver || nodeutil.Tampered(node.Labels) {
			continue
		}
		class, err := c.classes.Get(node.Labels[nodesetv1alpha1.LabelNodeClass])
		if err != nil || !c.readsQueue(class, queue) {
			continue
		}
		if nodeutil.Replica(node, class, now) {
			ours = append(ours, node)
		}
	}
	if len(ours) == 0 {
		return nil
	}
	// Two of them would be a fault elsewhere; the same one is picked every time.
	slices.SortFunc(ours, func(a, b *corev1.Node) int { return cmpString(a.Name, b.Name) })
	return ours[0]
}
