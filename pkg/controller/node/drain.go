package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/redact"
)

// defaultDrainTimeout applies when a class has none (the schema defaults it).
const defaultDrainTimeout = 10 * time.Minute

// mirrorPodAnnotation marks the API copy of a kubelet's static pod.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

// deprovisioner removes a drained Node's machine: nil once it is gone,
// ErrInProgress while it goes.
type deprovisioner struct {
	driver string
	// op is the driver operation, for the metrics.
	op     string
	remove func(ctx context.Context) error
	// whileDraining, when set, runs on each look at a drain that goes on
	// (a lifecycle action's heartbeat).
	whileDraining func(ctx context.Context, node *corev1.Node) error
}

// machineDeprovisioner deletes the Node's machine by its name, with the
// class classOf gives when the machine is to go (its credentials read then).
func machineDeprovisioner(driver drivers.MachineDriver, name string, classOf func(context.Context) (drivers.Class, error)) deprovisioner {
	return deprovisioner{driver: driver.Name(), op: opDelete, remove: func(ctx context.Context) error {
		class, err := classOf(ctx)
		if err != nil {
			return err
		}
		return driver.Delete(ctx, class, name)
	}}
}

// terminate takes a deleted Node through cordon, drain and deprovision, and
// removes its finalizer only once the driver confirmed the machine is gone.
// Each step is one short call; waiting is done by requeueing, never by
// blocking a worker.
func (c *Controller) terminate(ctx context.Context, node *corev1.Node, class *nodesetv1alpha1.NodeClass, deprovision deprovisioner) error {
	if !slices.Contains(node.Finalizers, nodesetv1alpha1.FinalizerTermination) || c.released.has(node) {
		return nil
	}
	if c.deprovisioned.has(node) {
		return c.releaseDeprovisioned(ctx, node)
	}
	node, started, cordoned, err := c.cordon(ctx, node)
	if err != nil {
		return err
	}
	wasDrained := node.Annotations[drainedAnnotation] != ""
	if !wasDrained {
		policy := drainPolicyOf(class)
		interruption, interrupted := interruptionOf(node)
		if interrupted {
			// AWS takes the machine at the notice's deadline, drained or not.
			policy = interruption.capped(policy, started)
		}
		done, err := c.drain(ctx, node, policy, started)
		if err == nil && !done && deprovision.whileDraining != nil {
			err = deprovision.whileDraining(ctx, node)
		}
		if err != nil || !done {
			return err
		}
		if interrupted {
			c.interruptionDrainEnded(node, interruption)
		}
		// Drained (or given up): deprovision in this same sync. The drain's
		// end is written only if the machine takes a while to go, so that
		// a restart does not drain again and the Node shows "deleting".
		node.Annotations[drainedAnnotation] = c.opts.Now().UTC().Format(time.RFC3339)
	}
	return c.deprovision(ctx, node, wasDrained, cordoned, deprovision)
}

// drainPolicy is a class's drain settings with their defaults.
type drainPolicy struct {
	timeout         time.Duration
	onTimeout       nodesetv1alpha1.DrainTimeoutAction
	waitForDetached bool
}

func drainPolicyOf(class *nodesetv1alpha1.NodeClass) drainPolicy {
	policy := drainPolicy{timeout: defaultDrainTimeout, onTimeout: nodesetv1alpha1.DrainTimeoutDeprovision}
	if class == nil || class.Spec.Drain == nil {
		return policy
	}
	if class.Spec.Drain.Timeout != nil {
		policy.timeout = class.Spec.Drain.Timeout.Duration
	}
	if class.Spec.Drain.OnTimeout != "" {
		policy.onTimeout = class.Spec.Drain.OnTimeout
	}
	policy.waitForDetached = class.Spec.Drain.WaitForVolumeDetach
	return policy
}

// cordon marks the Node unschedulable and records when its drain started,
// in one write when either is missing, and returns the cordoned Node, and
// whether it wrote it: the write tests the Node's UID (ChangePatch), so
// the Node returned is then the API server's Node of the name, not a
// cache's copy of one released since.
func (c *Controller) cordon(ctx context.Context, node *corev1.Node) (*corev1.Node, time.Time, bool, error) {
	started, err := time.Parse(time.RFC3339, node.Annotations[nodesetv1alpha1.AnnotationDrainStarted])
	if err == nil && node.Spec.Unschedulable {
		return node, started, false, nil
	}
	cordoned := node.DeepCopy()
	if err != nil {
		started = c.opts.Now()
		if cordoned.Annotations == nil {
			cordoned.Annotations = map[string]string{}
		}
		cordoned.Annotations[nodesetv1alpha1.AnnotationDrainStarted] = started.UTC().Format(time.RFC3339)
	}
	cordoned.Spec.Unschedulable = true
	// kube-controller-manager's node lifecycle controller gives every
	// cordoned Node this taint in a write of its own; given here with the
	// cordon, that write is not needed.
	if !slices.ContainsFunc(cordoned.Spec.Taints, isUnschedulableTaint) {
		cordoned.Spec.Taints = append(cordoned.Spec.Taints, unschedulableTaint)
	}
	// A patch, not an update: the kubelet's status or another controller's
	// write since the Node was read does not make the cordon conflict.
	updated, err := c.writeNode(ctx, c.opts.Drain, node, cordoned)
	if err != nil {
		return nil, started, false, err
	}
	// Go on with the cordoned Node in this sync: waiting for the update to
	// come back through the queue took seconds per Node when hundreds drain
	// at once.
	return updated, started, true, nil
}

// unschedulableTaint is the taint kube-controller-manager gives a cordoned
// Node.
var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// isUnschedulableTaint matches t as kube-controller-manager does (Taint's
// MatchTaint: key and effect).
func isUnschedulableTaint(t corev1.Taint) bool { return unschedulableTaint.MatchTaint(&t) }

// drain evicts the Node's pods and reports whether the machine may go now:
// every evictable pod is gone (and, when the class asks, every volume
// detached), or the drain timed out with onTimeout Deprovision. Otherwise
// it records the drain's progress on the Node and looks again later.
func (c *Controller) drain(ctx context.Context, node *corev1.Node, policy drainPolicy, started time.Time) (bool, error) {
	now := c.opts.Now()
	deadline := started.Add(policy.timeout)
	recheck := min(c.opts.DrainRecheck, deadline.Sub(now)+time.Second)
	var graceLeft time.Duration
	if policy.onTimeout == nodesetv1alpha1.DrainTimeoutDeprovision {
		graceLeft = deadline.Sub(now)
	}
	evicted, err := c.evictPods(ctx, node, now, started, graceLeft)
	if err != nil {
		return false, err
	}
	remaining := evicted.remaining
	attached, unwaitedVolumes := 0, 0
	if policy.waitForDetached {
		// The attach/detach controller lists what is still attached.
		attached = len(node.Status.VolumesAttached)
		if evicted.abandoned > 0 {
			// It keeps a pod's volumes attached until the pod is
			// terminated: a terminal phase, or deleted with no container
			// running in its status (kube-controller-manager
			// pkg/controller/volume/attachdetach/util DetermineVolumeAction,
			// pkg/volume/util IsPodTerminated). Only a kubelet reports
			// that, and none reports for the pods not waited for: their
			// volumes stay attached until the pods are deleted, which the
			// pod garbage collector does once the Node is gone. Waiting for
			// them would hold the drain to its timeout, and with onTimeout:
			// Cordon keep a dead machine's Node forever.
			attached, unwaitedVolumes = 0, attached
		}
	}
	switch {
	case remaining == 0 && attached > 0 && now.Before(deadline):
		if err := c.setDrainCondition(ctx, node, ReasonDraining, fmt.Sprintf(
			"all evictable pods are gone; waiting for %d volume(s) to detach (drain.waitForVolumeDetach), drain timeout at %s",
			attached, deadline.UTC().Format(time.RFC3339))); err != nil {
			return false, err
		}
		c.queue.AddAfter(node.Name, recheck)
		return false, nil
	case remaining == 0 && attached == 0:
		c.metrics.drains.WithLabelValues(drainDrained).Observe(now.Sub(started).Seconds())
		if c.drainConditionOf(node) != nil || evicted.abandoned > 0 || evicted.arrived > 0 {
			// Pods were evicted: say so. A Node that had nothing to drain
			// goes straight on, with no write for it.
			gone := "all evictable pods are gone"
			if evicted.abandoned > 0 {
				gone = fmt.Sprintf("all evictable pods are gone but %d terminating for over %s past their grace period, "+
					"not waited for: the Node is not Ready and no kubelet confirms their deletion", evicted.abandoned, longTerminating)
			}
			if unwaitedVolumes > 0 {
				gone += fmt.Sprintf("; %d volume(s) still attached, not waited for (drain.waitForVolumeDetach): "+
					"they stay attached while those pods exist", unwaitedVolumes)
			}
			if evicted.arrived > 0 {
				gone += fmt.Sprintf("; %d pod(s) created after the drain started, placed on the cordoned Node "+
					"(tolerating node.kubernetes.io/unschedulable, or naming it at their creation), neither evicted nor waited for", evicted.arrived)
			}
			c.recorder.Event(node, corev1.EventTypeNormal, ReasonDrained, strings.ToUpper(gone[:1])+gone[1:])
			if err := c.setDrainCondition(ctx, node, ReasonDrained, gone+"; deprovisioning the machine"); err != nil {
				return false, err
			}
		}
		return true, nil
	case now.Before(deadline):
		if c.drainConditionOf(node) == nil {
			c.recorder.Eventf(node, corev1.EventTypeNormal, ReasonDrainStarted, "Cordoned; evicting %d pod(s) with a drain timeout of %s", remaining, policy.timeout)
		}
		msg := fmt.Sprintf("%d pod(s) left to evict", remaining)
		// The pod and the budget that hold the drain are told, not only
		// counted: the tenant who owns them is whom to ask.
		blocker, failure := c.refusal(evicted.blocker), c.refusal(evicted.failure)
		if evicted.blocked > 0 {
			klog.FromContext(ctx).V(2).Info("Evictions blocked by disruption budgets; retrying", "pods", remaining, "blocked", evicted.blocked, "first", blocker)
			c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonEvictionBlocked,
				"%d pod eviction(s) refused by a PodDisruptionBudget (%s); retrying until the drain timeout of %s", evicted.blocked, blocker, policy.timeout)
			msg += fmt.Sprintf(", %d held by a PodDisruptionBudget (%s)", evicted.blocked, blocker)
		}
		if evicted.failed > 0 {
			// Not a budget: the API server's reason is the only clue to
			// what holds the drain (two budgets over one pod, a namespace
			// being deleted, a webhook), so it is told, not only logged.
			c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonEvictionFailed,
				"%d pod eviction(s) failed (%s); retrying until the drain timeout of %s", evicted.failed, failure, policy.timeout)
			msg += fmt.Sprintf(", %d eviction(s) failed (%s)", evicted.failed, failure)
		}
		if evicted.terminating > 0 {
			msg += fmt.Sprintf(", %d terminating (%s)", evicted.terminating, evicted.lingerer)
		}
		msg += "; drain timeout at " + deadline.UTC().Format(time.RFC3339)
		if err := c.setDrainCondition(ctx, node, ReasonDraining, msg); err != nil {
			return false, err
		}
		c.queue.AddAfter(node.Name, recheck)
		return false, nil
	case policy.onTimeout == nodesetv1alpha1.DrainTimeoutCordon:
		msg := fmt.Sprintf("%s after the drain timeout of %s%s; left cordoned for a human (drain.onTimeout: Cordon). "+
			"The machine is deprovisioned once they are gone.", leftOnNode(remaining, attached), policy.timeout, c.holding(evicted))
		if cond := c.drainConditionOf(node); cond == nil || cond.Reason != ReasonDrainTimedOut {
			c.metrics.drains.WithLabelValues(drainTimedOutCordoned).Observe(now.Sub(started).Seconds())
			c.recorder.Event(node, corev1.EventTypeWarning, ReasonDrainTimedOut, msg)
		}
		if err := c.setDrainCondition(ctx, node, ReasonDrainTimedOut, msg); err != nil {
			return false, err
		}
		// Keep looking, slowly: once a human has moved the pods, the drain ends.
		c.queue.AddAfter(node.Name, time.Minute)
		return false, nil
	default:
		msg := fmt.Sprintf("%s after the drain timeout of %s%s; deprovisioning anyway", leftOnNode(remaining, attached), policy.timeout, c.holding(evicted))
		c.metrics.drains.WithLabelValues(drainTimedOut).Observe(now.Sub(started).Seconds())
		c.recorder.Event(node, corev1.EventTypeWarning, ReasonDrainTimedOut, msg)
		if err := c.setDrainCondition(ctx, node, ReasonDrainTimedOut, msg); err != nil {
			return false, err
		}
		return true, nil
	}
}

// holding names what held a timed-out drain, if any: the first pod a
// budget held, the first other refusal and the first pod already
// terminating.
func (c *Controller) holding(evicted evictions) string {
	var held []string
	if evicted.blocked > 0 {
		held = append(held, "held by a PodDisruptionBudget: "+c.refusal(evicted.blocker))
	}
	if evicted.failed > 0 {
		held = append(held, "eviction failed: "+c.refusal(evicted.failure))
	}
	if evicted.terminating > 0 {
		held = append(held, "terminating: "+evicted.lingerer)
	}
	if len(held) == 0 {
		return ""
	}
	return " (" + strings.Join(held, "; ") + ")"
}

// leftOnNode says what a timed-out drain left: pods still on the node,
// volumes still attached (counted only with drain.waitForVolumeDetach).
func leftOnNode(pods, volumes int) string {
	switch {
	case volumes == 0:
		return fmt.Sprintf("%d pod(s) still on the node", pods)
	case pods == 0:
		return fmt.Sprintf("%d volume(s) still attached", volumes)
	}
	return fmt.Sprintf("%d pod(s) still on the node and %d volume(s) still attached", pods, volumes)
}

// deprovision removes the drained Node's machine, and once the driver says
// it is gone, the Node's finalizer. Even a Node that never got a providerID
// may have a machine (a crash between create and record): the delete is
// keyed by the name. live says the sync's own cordon just wrote the Node,
// deleting and with its finalizer, under its UID.
func (c *Controller) deprovision(ctx context.Context, node *corev1.Node, wasDrained, live bool, deprovision deprovisioner) error {
	logger := klog.FromContext(ctx)
	if err := c.mayAct(deprovision.op); err != nil {
		return err
	}
	if !live {
		// The machine goes by the Node's name: a cache behind the API
		// server (a new leader's, whose watch has not shown yet that its
		// predecessor released this Node and a Node of the name was made
		// again) would take the new Node's machine. Asked of the API
		// server first. A Node this sync cordoned needs no such look: the
		// cordon's write tested its UID, and only its finalizer's release
		// lets another Node of the name be made. Most scale-downs drain
		// nothing and go from cordon to deprovision in one sync, so most
		// Nodes cost no read here.
		got, err := c.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		switch {
		case err == nil && got.UID != node.UID:
			logger.Info("Not deprovisioning: the Node of the name is another Node now; the cache is behind", "uid", node.UID, "liveUID", got.UID)
			return nil // its event brings the Node back
		case err != nil && !apierrors.IsNotFound(err):
			return err
		}
	}
	start := c.opts.Now()
	err := deprovision.remove(ctx)
	c.metrics.driverCall(deprovision.driver, deprovision.op, start, err)
	if err != nil && !wasDrained {
		// The machine takes a while: record the drain's end now. A patch
		// of that annotation alone, not an update: another writer's change
		// since the Node was read (the kubelet's status, kube-controller-
		// manager's taints as the machine goes) would make an update
		// conflict, and every look until one went through would drain the
		// Node again.
		read := node.DeepCopy()
		delete(read.Annotations, drainedAnnotation)
		if _, writeErr := c.writeNode(ctx, c.opts.Drain, read, node); writeErr != nil {
			logger.V(2).Info("Could not record the end of the drain", "err", c.scrubbedError(writeErr))
		}
	}
	if errors.Is(err, drivers.ErrInProgress) {
		c.queue.AddAfter(node.Name, c.opts.DrainRecheck)
		return nil
	}
	if err != nil {
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonDeprovisionFailed, "Driver %s could not delete the machine: %v", deprovision.driver, err)
		return err
	}
	c.routine.record(node, ReasonDeprovisioned, deprovision.driver, fmt.Sprintf("Driver %s deleted the machine", deprovision.driver))
	c.retryWaiting(node.Labels[nodesetv1alpha1.LabelNodeClass])
	if err := c.releaseDeprovisioned(ctx, node); err != nil {
		return err
	}
	logger.V(2).Info("Machine deprovisioned; finalizer removed")
	return nil
}

// releaseDeprovisioned releases a Node whose machine is gone. A release
// refused is remembered (deprovisioned), so that its retry only releases.
func (c *Controller) releaseDeprovisioned(ctx context.Context, node *corev1.Node) error {
	if err := c.release(ctx, node); err != nil {
		c.deprovisioned.set(node, struct{}{})
		return err
	}
	c.deprovisioned.forget(node.Name)
	c.released.set(node, struct{}{})
	return nil
}

// DrainCondition is the Node condition that shows a drain's progress.
const DrainCondition corev1.NodeConditionType = nodesetv1alpha1.NodeConditionDraining

// Reason of the Draining condition while pods are being evicted.
const ReasonDraining = "Draining"

func drainCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == DrainCondition {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// setDrainCondition records the drain's progress in the Node's status when
// it changed. The kubelet patches only its own condition types, so this one
// stays. node is updated in place.
func (c *Controller) setDrainCondition(ctx context.Context, node *corev1.Node, reason, message string) error {
	if old := c.drainConditionOf(node); old != nil && old.Reason == reason && old.Message == message {
		return nil
	}
	now := metav1.NewTime(c.opts.Now())
	condition := corev1.NodeCondition{Type: DrainCondition, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now}
	if old := c.drainConditionOf(node); old != nil {
		condition.LastTransitionTime = old.LastTransitionTime
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{condition}}})
	if err != nil {
		return err
	}
	updated, err := c.opts.Drain.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return err
	}
	node.ResourceVersion = updated.ResourceVersion
	node.Status = updated.Status
	c.drainConditions.set(node, condition)
	return nil
}

// drainConditionOf is the Node's Draining condition as this controller
// last wrote it, else as the cache has it: a sync on the cache's copy from
// before that write (another writer's change came first) must not take a
// drain that evicted pods for one that had nothing to evict.
func (c *Controller) drainConditionOf(node *corev1.Node) *corev1.NodeCondition {
	if written, ok := c.drainConditions.get(node); ok {
		return &written
	}
	return drainCondition(node)
}

// release removes the Node's termination finalizer, and with it the last
// hold on a deleted Node. A JSON patch that names the finalizer and the
// Node's UID, not an update: kube-controller-manager taints a cordoned Node
// (node.kubernetes.io/unschedulable) while its drain runs, and an update
// from the copy read before would conflict with that write. What else the
// sync changed in its copy (the drain's end) is of no use once the Node is
// released.
func (c *Controller) release(ctx context.Context, node *corev1.Node) error {
	patch, ok := nodeutil.RemoveFinalizerPatch(node, nodesetv1alpha1.FinalizerTermination)
	if !ok {
		return nil
	}
	_, err := c.kube.CoreV1().Nodes().Patch(ctx, node.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// drainedAnnotation records that the drain finished (or gave up) so a
// restart goes straight to deprovisioning.
const drainedAnnotation = nodesetv1alpha1.AnnotationDrainFinished

// evictions is what a look at a draining Node's pods found.
type evictions struct {
	// remaining are the pods a drain moves still on the node.
	remaining int
	// abandoned are the pods not waited for: terminating for longer than
	// longTerminating past their grace period on a Node that is not Ready.
	abandoned int
	// arrived are the pods created after the drain started: neither
	// evicted nor waited for (see evictPods).
	arrived int
	// blocked are the evictions a PodDisruptionBudget refused (429);
	// blocker names the first pod and the API server's words on its
	// budget (which name the budget).
	blocked int
	blocker string
	// failed are the evictions refused for another reason; failure names
	// the first, with the API server's answer.
	failed  int
	failure string
	// terminating are the pods waited for that were already being deleted
	// (a deletionTimestamp); lingerer names the first and when its grace
	// period ends.
	terminating int
	lingerer    string
}

// longTerminating is how long past the end of its grace period (its
// deletionTimestamp) a pod on a Node that is not Ready may stay before the
// drain stops waiting for it: no kubelet will confirm its deletion, so it
// would hold the drain until the timeout. Karpenter waits the same minute
// past the deletionTimestamp (on any Node); cluster-autoscaler a grace
// period and 30s more; Cluster API, on an unreachable Node, 5 minutes
// (kubectl drain's --skip-wait-for-delete-timeout).
const longTerminating = time.Minute

// arrivalMargin is how much later than the drain's start a pod must have
// been created to be taken for one placed on the cordoned Node. The start is
// this controller's clock, a pod's creationTimestamp the API server's; the
// margin covers a skew between them and a scheduler whose cache did not show
// the cordon yet, so a pod placed just before the cordon is still evicted
// and waited for. A pod that comes back at each eviction is then waited for
// at most this long.
const arrivalMargin = 15 * time.Second

// evictPods asks the Eviction API to evict every pod on the node that a
// drain should move (not mirror pods, not DaemonSet pods, not finished
// pods, not pods created after the drain started), and says how many are
// still there and which evictions were refused.
//
// A pod created after the drain started (its creationTimestamp, set by the
// API server, more than arrivalMargin later than drain-started) came to a
// Node already cordoned:
// the scheduler places there a pod that tolerates
// node.kubernetes.io/unschedulable:NoSchedule (its NodeUnschedulable
// filter; a blanket `operator: Exists` toleration does), and no scheduler
// is asked for a pod that names its Node (spec.nodeName; the kubelet admits
// it on a cordoned Node). Its controller makes such a pod again in the same
// place each time it is evicted, so waiting for it would hold the drain to
// its timeout (and, with onTimeout: Cordon, the machine forever). kubectl
// drain waits only for the pods it listed once the Node was cordoned
// (kubectl pkg/drain/drain.go: GetPodsForDeletion once, then
// waitForDelete on those pods by UID), and cluster-autoscaler only for the
// pods it evicted (core/scaledown/actuation/drain.go, waitPodsToDisappear):
// a pod that came later goes with the machine, and the pod garbage
// collector deletes it once the Node is gone. The same here.
//
// Only a pod that tolerates the cordon's taint, or whose spec.nodeName was
// given at its creation (namesItsNode), is taken for one: a drain's start
// is kept across a restart and across a human's uncordon (the cordon is put
// back, the start stays), and a pod the scheduler placed while the Node was
// uncordoned is an ordinary pod, evicted and waited for. A pod that names
// its Node skips the scheduler, and the kubelet admits it whatever the
// Node's NoSchedule taints: the cordon never stopped its controller, which
// puts it back at each eviction whether it tolerates the cordon or not.
//
// graceLeft, when positive, is the time left before the machine goes
// whatever is still on it (onTimeout: Deprovision, an interruption's
// deadline): an eviction asks for no longer a grace period than that
// (evictionOptions).
func (c *Controller) evictPods(ctx context.Context, node *corev1.Node, now, started time.Time, graceLeft time.Duration) (evictions, error) {
	var out evictions
	pods, err := c.pods.OnNode(ctx, node.Name)
	if err != nil {
		return out, err
	}
	ready := nodeutil.IsReady(node)
	for i := range pods {
		pod := &pods[i]
		if !shouldEvict(pod) {
			continue
		}
		if pod.CreationTimestamp.After(started.Add(arrivalMargin)) && (toleratesCordon(pod) || namesItsNode(pod)) {
			out.arrived++
			continue
		}
		if !ready && pod.DeletionTimestamp != nil && now.After(pod.DeletionTimestamp.Add(longTerminating)) {
			// Its containers stop with the machine; the Node's deletion
			// then lets the pod garbage collector remove it.
			out.abandoned++
			continue
		}
		out.remaining++
		if pod.DeletionTimestamp != nil {
			// Already going: an eviction cannot shorten its grace period,
			// which its deleter chose. Named, as it may hold the drain long.
			if out.terminating == 0 {
				out.lingerer = fmt.Sprintf("pod %s/%s, its grace period ending at %s",
					pod.Namespace, pod.Name, pod.DeletionTimestamp.UTC().Format(time.RFC3339))
			}
			out.terminating++
			continue
		}
		err := c.opts.Evict(ctx, pod, evictionOptions(pod, graceLeft))
		switch {
		case err == nil || apierrors.IsNotFound(err):
		case refusedByBudget(err):
			if out.blocked == 0 {
				out.blocker = fmt.Sprintf("pod %s/%s: %s", pod.Namespace, pod.Name, budgetCause(err))
			}
			out.blocked++
		default:
			// The API server's answer may quote an admission webhook's
			// message: logged as it is told, scrubbed and bounded.
			klog.FromContext(ctx).V(2).Info("Eviction failed; will retry", "pod", klog.KObj(pod), "err", c.refusal(err.Error()))
			if out.failed == 0 {
				out.failure = fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err)
			}
			out.failed++
		}
	}
	return out, nil
}

// refusedByBudget reports whether an eviction was refused for a
// PodDisruptionBudget: a 429 whose answer names a budget as its cause, as
// the Eviction API's every budget refusal does. A 429 without one is no
// budget: the API server shedding load (priority and fairness) or a
// webhook's limit, told with its answer as any other refusal.
func refusedByBudget(err error) bool {
	return apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause)
}

// budgetCause is what the Eviction API says of the budget that refused an
// eviction: the message of its DisruptionBudget cause ("The disruption
// budget web needs 3 healthy pods and has 3 currently", kubernetes
// pkg/registry/core/pod/storage/eviction.go, checkAndDecrement), which
// names the budget; else the answer's own message.
func budgetCause(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, cause := range status.Status().Details.Causes {
			if cause.Type == policyv1.DisruptionBudgetCause && cause.Message != "" {
				return cause.Message
			}
		}
	}
	return err.Error()
}

// refusalLimit bounds the API server's words on a refused eviction as the
// Draining condition and the Events tell them: they may quote a budget's
// status condition or an admission webhook's message, of any length.
const refusalLimit = 512

// refusal is an eviction's refusal as shown: scrubbed of credentials and
// bounded.
func (c *Controller) refusal(text string) string {
	return redact.Cut(c.scrub(text), refusalLimit)
}

// evictionOptions are the DeleteOptions of pod's eviction: none, unless
// the machine goes at a deadline (graceLeft > 0) that the pod's
// terminationGracePeriodSeconds outlasts; then a grace period that ends by
// it, at least a second (0 would delete the pod at once, unconfirmed by
// its kubelet). The Eviction API deletes the pod with these options
// (kubernetes pkg/registry/core/pod/storage/eviction.go), and a grace
// period shorter than the pod's own is honoured. A tenant's pod asking
// for hours would otherwise be stopped by the machine going away, not by
// its kubelet: no SIGKILL, no volumes unmounted, no deletion confirmed
// before the instance is terminated, as the drain timed out with it still
// there. cluster-autoscaler caps the grace period of its evictions the
// same way (--max-graceful-termination-sec, core/scaledown/actuation/
// drain.go, evictPod).
func evictionOptions(pod *corev1.Pod, graceLeft time.Duration) *metav1.DeleteOptions {
	if graceLeft <= 0 {
		return nil
	}
	left := max(int64(graceLeft/time.Second), 1)
	own := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		own = *pod.Spec.TerminationGracePeriodSeconds
	}
	if own <= left {
		return nil
	}
	return &metav1.DeleteOptions{GracePeriodSeconds: &left}
}

// toleratesCordon reports whether pod tolerates the taint of a cordoned
// Node (node.kubernetes.io/unschedulable:NoSchedule), which the scheduler's
// NodeUnschedulable filter asks of a pod it places on one.
func toleratesCordon(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.ToleratesTaint(klog.Background(), &unschedulableTaint, false)
	})
}

// namesItsNode reports whether pod's spec.nodeName was given when it was
// created, rather than set by a binding (the scheduler's pods/binding): one
// of the pod's managed-fields entries, written by its creator, owns
// spec.nodeName. A binding sets the field in storage without an entry (the
// API server's field manager tracks the Binding it was sent, not the pod),
// and spec.nodeName cannot be set by an update. A pod whose managed fields
// were cleared is taken for a scheduled one: evicted and waited for.
func namesItsNode(pod *corev1.Pod) bool {
	for _, entry := range pod.ManagedFields {
		if entry.Subresource != "" || entry.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(entry.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:nodeName"]; ok {
			return true
		}
	}
	return false
}

// evictWithoutRetries posts one eviction. A budget that refuses answers 429
// with a Retry-After, which the typed client would wait out and retry up to
// ten times inside the call, blocking a worker: here retries are off and the
// drain requeues instead.
func evictWithoutRetries(kube kubernetes.Interface) func(context.Context, *corev1.Pod, *metav1.DeleteOptions) error {
	return func(ctx context.Context, pod *corev1.Pod, options *metav1.DeleteOptions) error {
		eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}, DeleteOptions: options}
		return kube.CoreV1().RESTClient().Post().
			Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("eviction").
			MaxRetries(0).
			Body(eviction).
			Do(ctx).Error()
	}
}

// shouldEvict says whether a drain moves this pod (and waits for it).
func shouldEvict(pod *corev1.Pod) bool {
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		return false
	}
	if pod.Annotations[nodesetv1alpha1.AnnotationSkipDrain] == "true" {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}
