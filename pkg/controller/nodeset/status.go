package nodeset

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/plan"
	"nodeset.dev/nodeset/pkg/redact"
	"nodeset.dev/nodeset/pkg/resolve"
)

// Reasons of the Available, Progressing and ReplicaFailure conditions.
const (
	ReasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	ReasonScalingUp                  = "ScalingUp"
	ReasonScalingDown                = "ScalingDown"
	ReasonWaitingForReady            = "WaitingForReady"
	ReasonWaitingForAvailable        = "WaitingForAvailable"
	ReasonComplete                   = "Complete"
	ReasonPaused                     = "Paused"
	ReasonRollingUpdate              = "RollingUpdate"
	ReasonStalled                    = "Stalled"
	ReasonReplicaFailure             = "ReplicaFailure"
	ReasonGroupFailure               = "GroupFailure"
	ReasonProvisioningFailed         = "ProvisioningFailed"
	ReasonGroupUpdating              = "GroupUpdating"
	ReasonGroupUpdateFailed          = "GroupUpdateFailed"
	ReasonDeleting                   = "Deleting"
	ReasonProgressDeadlineExceeded   = "ProgressDeadlineExceeded"
)

// computeStatus is the status a NodeSet should have given its Nodes. It is pure.
func computeStatus(set *nodesetv1alpha1.NodeSet, res *resolution, nodes []*corev1.Node, manageErr error, now time.Time) nodesetv1alpha1.NodeSetStatus {
	status := *set.Status.DeepCopy()
	if !res.unobserved {
		status.ObservedGeneration = set.Generation
	}
	if res.class != nil && !res.revalidating {
		status.ObservedClassGeneration = res.class.Generation
	}
	status.Selector = resolve.Selector(set).String()
	status.TemplateHash = res.templateHash
	active := plan.Active(nodes)
	countReplicas(&status, set, active, now)

	// While the class is revalidated, the conditions are of the verdict and
	// template recorded before: of the generation the status observed.
	generation := set.Generation
	if res.revalidating {
		generation = set.Status.ObservedGeneration
	}
	setCondition := func(c metav1.Condition) {
		c.ObservedGeneration = generation
		c.Message = conditionMessage(c.Message)
		meta.SetStatusCondition(&status.Conditions, c)
	}
	setCondition(res.accepted)
	if res.accepted.Reason == ReasonLimitExceeded {
		// The Accepted condition's lastTransitionTime is when the set began
		// waiting for room in its class's limits, and the room a machine
		// gone frees goes to the set that waited longest (wakeLimited). A
		// set refused for another reason before (a label it may not set,
		// parked there by its tenant for as long as it likes) stays False
		// when it turns LimitExceeded, and would keep the time of that
		// refusal: its wait for room starts now.
		if before := findCondition(set.Status.Conditions, nodesetv1alpha1.NodeSetAccepted); before != nil && before.Reason != ReasonLimitExceeded {
			meta.FindStatusCondition(status.Conditions, nodesetv1alpha1.NodeSetAccepted).LastTransitionTime = metav1.NewTime(now)
		}
	}

	desired := plan.Replicas(set)
	minAvailable := desired - maxUnavailable(set, desired)
	if status.AvailableReplicas >= minAvailable {
		setCondition(metav1.Condition{Type: nodesetv1alpha1.NodeSetAvailable, Status: metav1.ConditionTrue,
			Reason: ReasonMinimumReplicasAvailable, Message: fmt.Sprintf("%d of %d nodes available", status.AvailableReplicas, desired)})
	} else {
		setCondition(metav1.Condition{Type: nodesetv1alpha1.NodeSetAvailable, Status: metav1.ConditionFalse,
			Reason: ReasonMinimumReplicasUnavailable, Message: fmt.Sprintf("%d of %d nodes available, %d required", status.AvailableReplicas, desired, minAvailable)})
	}

	progressing := metav1.Condition{Type: nodesetv1alpha1.NodeSetProgressing, Status: metav1.ConditionTrue}
	outdated := status.Replicas - status.UpdatedReplicas
	held := ""
	if res.accepted.Status == metav1.ConditionTrue && !set.Spec.Paused && plan.Rolling(set, res.templateHash, active) {
		held = heldForAHuman(set, res, nodes, now)
	}
	// A set waiting for room in its class's limits is no refused set: it
	// works towards its spec with the room there is, and goes on when
	// room comes (another set's machine gone, a limit raised), as a
	// Deployment whose new pods a quota refuses keeps progressing until
	// its deadline. Its Progressing condition is that of its work.
	waitsForRoom := res.accepted.Reason == ReasonLimitExceeded
	switch {
	case res.accepted.Status != metav1.ConditionTrue && !waitsForRoom:
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, ReasonNotAccepted, res.accepted.Message
	case set.Spec.Paused && outdated > 0:
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionUnknown, ReasonPaused,
			fmt.Sprintf("the NodeSet is paused with %d of %d nodes updated", status.UpdatedReplicas, status.Replicas)
	case plan.Rolling(set, res.templateHash, active) && manageErr != nil:
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, ReasonStalled,
			fmt.Sprintf("rolling update stalled with %d of %d nodes updated: %v", status.UpdatedReplicas, desired, manageErr)
	case held != "":
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, ReasonStalled,
			fmt.Sprintf("rolling update stalled with %d of %d nodes updated: %s", status.UpdatedReplicas, desired, held)
	case plan.Rolling(set, res.templateHash, active):
		progressing.Reason, progressing.Message = ReasonRollingUpdate,
			fmt.Sprintf("%d of %d nodes updated, %d outdated, %d available", status.UpdatedReplicas, desired, outdated, status.AvailableReplicas)
	case plan.GroupRefused(set, res.templateHash, outdated):
		// Managed: the cloud refused the change the rollout waits for, and
		// takes it on no retry: no progress is to come until the class or
		// the set changes.
		g := set.Status.Group
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, ReasonGroupUpdateFailed,
			fmt.Sprintf("%d of %d nodes updated, %d outdated: cloud group %s refused the change to template %s: %s",
				status.UpdatedReplicas, desired, outdated, g.Name, res.templateHash, g.Message)
	case set.Status.Group != nil && (set.Status.Group.State == "CREATING" || plan.GroupUpdating(set.Status.Group)):
		// A driver-native change (EKS managed node groups) is under way.
		progressing.Reason, progressing.Message = ReasonGroupUpdating, groupProgress(set.Status.Group)
	case plan.GroupBehind(set, res.templateHash):
		// Managed: the group has not taken the set's template yet (the
		// node controller has not acted on the edit, or the cloud has not
		// started its update): the rollout is not done, it has not begun.
		g := set.Status.Group
		progressing.Reason, progressing.Message = ReasonGroupUpdating,
			fmt.Sprintf("cloud group %s is at template %s, not yet at %s", g.Name, g.TemplateHash, res.templateHash)
		if g.Message != "" {
			progressing.Message += ": " + g.Message
		}
	case status.Replicas < desired:
		progressing.Reason, progressing.Message = ReasonScalingUp, fmt.Sprintf("%d of %d nodes created", status.Replicas, desired)
	case status.Replicas > desired:
		progressing.Reason, progressing.Message = ReasonScalingDown, fmt.Sprintf("%d nodes, scaling down to %d", status.Replicas, desired)
	// A paused set with no outdated node holds no rollout: it says what
	// it waits for, or Complete, as its status counts do (a paused
	// Deployment that is rolled out passes kubectl rollout status). It is
	// not timed while paused (lastProgress).
	case status.ReadyReplicas < desired:
		progressing.Reason, progressing.Message = ReasonWaitingForReady, fmt.Sprintf("%d of %d nodes ready", status.ReadyReplicas, desired)
	case status.AvailableReplicas < desired:
		// Complete, as a Deployment's, only once every node is available.
		progressing.Reason, progressing.Message = ReasonWaitingForAvailable,
			fmt.Sprintf("%d of %d nodes available (Ready for minReadySeconds, %d)", status.AvailableReplicas, desired, set.Spec.MinReadySeconds)
	case int32(len(nodes)) > desired:
		// After what the set waits for: a node replaced while its
		// replacement is not Ready yet leaves the set waiting for it.
		progressing.Reason, progressing.Message = ReasonScalingDown, fmt.Sprintf("%d nodes terminating", int32(len(nodes))-status.Replicas)
	case outdated > 0 && set.Spec.Strategy.Type == nodesetv1alpha1.ManagedStrategy && plan.GroupUpdateFailed(set.Status.Group):
		// The cloud group's own update, which was to replace the outdated
		// nodes, failed and is not started again by itself: the set is not
		// complete, and no progress is to come.
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, ReasonGroupUpdateFailed,
			fmt.Sprintf("%d of %d nodes updated, %d outdated: update %s of cloud group %s is %s", status.UpdatedReplicas, desired, outdated,
				set.Status.Group.UpdateID, set.Status.Group.Name, set.Status.Group.UpdateStatus)
	case outdated > 0:
		// OnDelete (or Managed): outdated nodes stay until deleted.
		progressing.Reason, progressing.Message = ReasonComplete,
			fmt.Sprintf("%d of %d nodes ready; %d outdated, replaced when deleted (strategy %s)", status.ReadyReplicas, desired, outdated, set.Spec.Strategy.Type)
	default:
		progressing.Reason, progressing.Message = ReasonComplete, fmt.Sprintf("%d of %d nodes ready", status.ReadyReplicas, desired)
	}
	if waitsForRoom && working(progressing) {
		progressing.Message += "; waiting for room: " + res.accepted.Message
	}
	status.LastProgressTime = lastProgress(set, &status, progressing, now)
	if deadline, ok := progressDeadline(set, status.LastProgressTime); ok && !now.Before(deadline) {
		progressing.Status, progressing.Reason, progressing.Message = metav1.ConditionFalse, ReasonProgressDeadlineExceeded,
			fmt.Sprintf("no progress for %ds (progressDeadlineSeconds) since %s: %s", *set.Spec.ProgressDeadlineSeconds,
				status.LastProgressTime.UTC().Format(time.RFC3339), progressing.Message)
	}
	setCondition(progressing)

	notMade := provisioningFailure(active)
	switch group := set.Status.Group; {
	case manageErr != nil:
		setCondition(metav1.Condition{Type: nodesetv1alpha1.NodeSetReplicaFailure, Status: metav1.ConditionTrue,
			Reason: ReasonReplicaFailure, Message: manageErr.Error()})
	case group != nil && group.Message != "":
		// The node controller's word on the cloud group (a capacity error,
		// a degraded group).
		setCondition(metav1.Condition{Type: nodesetv1alpha1.NodeSetReplicaFailure, Status: metav1.ConditionTrue,
			Reason: ReasonGroupFailure, Message: fmt.Sprintf("cloud group %s: %s", group.Name, group.Message)})
	case notMade != "":
		setCondition(metav1.Condition{Type: nodesetv1alpha1.NodeSetReplicaFailure, Status: metav1.ConditionTrue,
			Reason: ReasonProvisioningFailed, Message: notMade})
	default:
		meta.RemoveStatusCondition(&status.Conditions, nodesetv1alpha1.NodeSetReplicaFailure)
	}
	return status
}

// working reports whether a Progressing condition says the set works
// towards its spec: rolling out (stalled too: a rollout whose creations
// fail runs into the deadline, as a Deployment's does, and a failure now
// and then does not start its clock afresh), scaling up, or waiting for
// its nodes to become Ready or available, or for its cloud group's
// update. Only then does spec.progressDeadlineSeconds apply.
func working(progressing metav1.Condition) bool {
	switch progressing.Reason {
	case ReasonRollingUpdate, ReasonStalled, ReasonScalingUp, ReasonWaitingForReady, ReasonWaitingForAvailable, ReasonGroupUpdating:
		return true
	}
	return false
}

// lastProgress is the set's lastProgressTime given its new status and
// Progressing condition (before any deadline is applied). It is unset
// unless the set is working and not paused (a paused set's scaling is not
// timed, as a paused Deployment's progress is not). The clock starts with
// new work: a new generation of the spec, or a new template (a class
// edit); a set that was done and then lost or replaced a node is not
// timed, as a complete Deployment is not. It is now again when the set
// has more nodes Ready or available, or fewer outdated nodes, than its
// last status said; else as it was. A node replaced (deleted, and made
// again) is no progress: the clock runs on through machines that never
// register.
func lastProgress(set *nodesetv1alpha1.NodeSet, status *nodesetv1alpha1.NodeSetStatus, progressing metav1.Condition, now time.Time) *metav1.Time {
	if set.Spec.Paused || !working(progressing) {
		return nil
	}
	old := &set.Status
	newWork := old.ObservedGeneration != status.ObservedGeneration || old.TemplateHash != status.TemplateHash
	if old.LastProgressTime == nil && !newWork {
		return nil
	}
	if old.LastProgressTime == nil || newWork ||
		status.ReadyReplicas > old.ReadyReplicas || status.AvailableReplicas > old.AvailableReplicas ||
		status.Replicas-status.UpdatedReplicas < old.Replicas-old.UpdatedReplicas {
		t := metav1.NewTime(now.Truncate(time.Second))
		return &t
	}
	return old.LastProgressTime
}

// progressDeadline is when the set, last progressing at last, misses its
// spec.progressDeadlineSeconds, and whether it has one.
func progressDeadline(set *nodesetv1alpha1.NodeSet, last *metav1.Time) (time.Time, bool) {
	if last == nil || set.Spec.ProgressDeadlineSeconds == nil {
		return time.Time{}, false
	}
	return last.Add(time.Duration(*set.Spec.ProgressDeadlineSeconds) * time.Second), true
}

// countReplicas sets the replica counts of status from the set's active
// Nodes; a Node is up to date when it has status.TemplateHash.
func countReplicas(status *nodesetv1alpha1.NodeSetStatus, set *nodesetv1alpha1.NodeSet, active []*corev1.Node, now time.Time) {
	status.Replicas = int32(len(active))
	status.ReadyReplicas, status.AvailableReplicas, status.UpdatedReplicas = 0, 0, 0
	minReady := time.Duration(set.Spec.MinReadySeconds) * time.Second
	for _, node := range active {
		if nodeutil.IsReady(node) {
			status.ReadyReplicas++
		}
		if plan.Available(node, minReady, now) {
			status.AvailableReplicas++
		}
		if status.TemplateHash != "" && node.Labels[nodesetv1alpha1.LabelTemplateHash] == status.TemplateHash {
			status.UpdatedReplicas++
		}
	}
}

// deletingStatus is the status of a set being deleted, whose Nodes are
// going: the counts of the Nodes not yet deleted, and Progressing True with
// reason Deleting, counting the Nodes left. The other conditions keep
// what they said before the deletion. It is pure.
func deletingStatus(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node, now time.Time) nodesetv1alpha1.NodeSetStatus {
	status := *set.Status.DeepCopy()
	status.ObservedGeneration = set.Generation
	status.LastProgressTime = nil
	countReplicas(&status, set, plan.Active(nodes), now)
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: nodesetv1alpha1.NodeSetProgressing, Status: metav1.ConditionTrue,
		Reason: ReasonDeleting, ObservedGeneration: set.Generation,
		Message: fmt.Sprintf("the NodeSet is being deleted; nodes left: %d, terminating: %d", len(nodes), len(nodes)-int(status.Replicas))})
	return status
}

// provisioningFailure tells of the set's Nodes whose machine the driver
// could not make, as the node controller recorded on them: how many, and
// the error of the first by name (one, so the message does not change as
// others fail alike). "" when there are none. The error was scrubbed and
// cut where it was recorded (nodeutil.ProvisioningFailed).
func provisioningFailure(active []*corev1.Node) string {
	var first *corev1.Node
	failed := 0
	for _, node := range active {
		if !nodeutil.ProvisioningFailed(node) {
			continue
		}
		failed++
		if first == nil || node.Name < first.Name {
			first = node
		}
	}
	if failed == 0 {
		return ""
	}
	return fmt.Sprintf("the driver could not make the machine of %d of %d nodes; %s: %s",
		failed, len(active), first.Name, first.Annotations[nodesetv1alpha1.AnnotationProvisioningError])
}

// heldForAHuman says why a rolling update cannot move, when it waits for a
// Node whose drain timed out and that its class leaves cordoned for a
// human (drain.onTimeout: Cordon): its plan has nothing to do while such a
// Node holds a place. It is "" otherwise.
func heldForAHuman(set *nodesetv1alpha1.NodeSet, res *resolution, nodes []*corev1.Node, now time.Time) string {
	if res.class == nil || res.class.Spec.Drain == nil || res.class.Spec.Drain.OnTimeout != nodesetv1alpha1.DrainTimeoutCordon {
		return ""
	}
	p := plan.Decide(set, res.templateHash, nodes, now)
	if (p.Create > 0 && !res.group) || len(p.Remove) > 0 {
		return ""
	}
	for _, node := range nodes {
		if node.DeletionTimestamp == nil {
			continue
		}
		for _, c := range node.Status.Conditions {
			if c.Type == nodesetv1alpha1.NodeConditionDraining && c.Reason == nodesetv1alpha1.ReasonDrainTimedOut {
				return fmt.Sprintf("node %s is left for a human: %s", node.Name, c.Message)
			}
		}
	}
	return ""
}

// untilAvailable is how long until the first of the set's Ready Nodes that
// is not yet available has been Ready for minReadySeconds, and whether
// there is such a Node.
func untilAvailable(set *nodesetv1alpha1.NodeSet, nodes []*corev1.Node, now time.Time) (time.Duration, bool) {
	minReady := time.Duration(set.Spec.MinReadySeconds) * time.Second
	if minReady == 0 {
		return 0, false
	}
	var next time.Duration
	found := false
	for _, node := range plan.Active(nodes) {
		since, ready := plan.ReadySince(node)
		if !ready || plan.Available(node, minReady, now) {
			continue
		}
		if wait := since.Add(minReady).Sub(now); !found || wait < next {
			next, found = wait, true
		}
	}
	return next, found
}

// maxUnavailable is how many nodes may be unavailable: the rolling update's
// bound, 0 for the other strategies.
func maxUnavailable(set *nodesetv1alpha1.NodeSet, replicas int32) int32 {
	if !plan.RollingUpdate(set) {
		return 0
	}
	_, unavailable := plan.Bounds(set, int(replicas))
	return int32(unavailable)
}

// updateStatus writes status when it differs from what the set has. While
// Nodes come and go, counts and condition messages change with every Node;
// such changes are written at most once per StatusInterval per set (the
// last one always: the set is synced again when the interval ends). A new
// generation, selector, template hash, group or condition status or reason
// is written at once.
func (c *Controller) updateStatus(ctx context.Context, set *nodesetv1alpha1.NodeSet, status nodesetv1alpha1.NodeSetStatus) error {
	if equality.Semantic.DeepEqual(set.Status, status) {
		return nil
	}
	key := set.Namespace + "/" + set.Name
	if wait := c.statusWait(key, set.Status, status); wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	set = set.DeepCopy()
	set.Status = status
	_, err := c.nodesetClient.NodesetV1alpha1().NodeSets(set.Namespace).UpdateStatus(ctx, set, metav1.UpdateOptions{})
	if isNotFound(err) {
		return nil
	}
	if err == nil {
		c.statusWritten(key)
	}
	return err
}

// statusWait is how long a status change of the set should wait, 0 to
// write it now.
func (c *Controller) statusWait(key string, old, status nodesetv1alpha1.NodeSetStatus) time.Duration {
	if c.statusInterval <= 0 || !onlyProgress(old, status) {
		return 0
	}
	c.statusMu.Lock()
	last, ok := c.lastStatus[key]
	c.statusMu.Unlock()
	if !ok {
		return 0
	}
	return c.statusInterval - c.now().Sub(last)
}

func (c *Controller) statusWritten(key string) {
	if c.statusInterval <= 0 {
		return
	}
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	now := c.now()
	c.lastStatus[key] = now
	// Forget sets not written for a while, so deleted ones do not pile up.
	for k, t := range c.lastStatus {
		if now.Sub(t) > 10*c.statusInterval {
			delete(c.lastStatus, k)
		}
	}
}

// onlyProgress reports whether status differs from old only in counts and
// condition messages.
func onlyProgress(old, status nodesetv1alpha1.NodeSetStatus) bool {
	if old.ObservedGeneration != status.ObservedGeneration || old.ObservedClassGeneration != status.ObservedClassGeneration || old.Selector != status.Selector ||
		old.TemplateHash != status.TemplateHash || !equality.Semantic.DeepEqual(old.Group, status.Group) ||
		len(old.Conditions) != len(status.Conditions) {
		return false
	}
	for i := range old.Conditions {
		a, b := old.Conditions[i], status.Conditions[i]
		if a.Type != b.Type || a.Status != b.Status || a.Reason != b.Reason {
			return false
		}
	}
	return true
}

func groupProgress(g *nodesetv1alpha1.GroupStatus) string {
	msg := fmt.Sprintf("cloud group %s is %s", g.Name, g.State)
	if g.UpdateID != "" {
		msg += fmt.Sprintf("; update %s %s", g.UpdateID, g.UpdateStatus)
	}
	return msg
}

// maxConditionMessage is the most bytes the API server takes in a
// condition's message.
const maxConditionMessage = 32768

// conditionMessage is message cut to fit a condition: a refusal naming
// every field of a template at the schema's bounds can be longer, and a
// status that does not fit is never written, leaving the tenant with no
// reason at all.
func conditionMessage(message string) string {
	return redact.Cut(message, maxConditionMessage)
}
