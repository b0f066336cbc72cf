package nodeset

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/resolve"
)

// TestClassRevalidationKeepsTheRolloutStatus: while the node controller
// validates an edit of the class, the current template is not known. The
// set's status keeps the template hash it recorded, so its up-to-date Nodes
// stay up to date (no UP-TO-DATE 0, no rolling update that is not there,
// which cluster-autoscaler would also read), and observedGeneration does
// not claim a generation nothing was decided for.
func TestClassRevalidationKeepsTheRolloutStatus(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	nodes := []*corev1.Node{
		setNode(t, set, class, "web-a", time.Hour, true),
		setNode(t, set, class, "web-b", time.Hour, true),
		setNode(t, set, class, "web-c", time.Hour, true),
	}
	f := newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	before := f.status()
	require.NotEmpty(t, before.TemplateHash)
	require.EqualValues(t, 3, before.UpdatedReplicas)

	edited := class.DeepCopy()
	edited.Generation = 2 // its Valid condition is of generation 1
	tenantEdit := set.DeepCopy()
	tenantEdit.Generation = 3
	tenantEdit.Status = before
	f = newFixture(t, edited, tenantEdit, nodes...)
	require.NoError(t, f.sync())
	after := f.status()
	assert.Equal(t, before.TemplateHash, after.TemplateHash, "the recorded template stays")
	assert.EqualValues(t, 3, after.UpdatedReplicas, "the Nodes are no more outdated than they were")
	assert.EqualValues(t, 2, after.ObservedGeneration, "generation 3 is not acted on until the class is validated")
	progressing := findCondition(after.Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, progressing)
	assert.Equal(t, ReasonComplete, progressing.Reason, progressing.Message)
	for _, c := range after.Conditions {
		assert.EqualValues(t, 2, c.ObservedGeneration, "condition %s: of the verdict and template of generation 2", c.Type)
	}
	require.EqualValues(t, 1, before.ObservedClassGeneration, "the status is of the class's generation 1")
	assert.EqualValues(t, 1, after.ObservedClassGeneration, "and stays so until generation 2 is validated")

	validated := edited.DeepCopy()
	validated.Status.Conditions[0].ObservedGeneration = 2
	tenantEdit.Status = after
	f = newFixture(t, validated, tenantEdit, nodes...)
	require.NoError(t, f.sync())
	assert.EqualValues(t, 2, f.status().ObservedClassGeneration, "then it is of generation 2")
}

// TestMinReadySecondsWaitIsTimed: a rollout waits for a new Node to be
// available (Ready for minReadySeconds); nothing about the Node changes
// when that moment passes, so the set is synced again then, also when the
// sync wrote no status (a controller that just took over finds the status
// it would write already there).
func TestMinReadySecondsWaitIsTimed(t *testing.T) {
	class := validClass("sim")
	set := newSet(1)
	set.Spec.MinReadySeconds = 3600
	node := setNode(t, set, class, "web-a", time.Hour, true)
	node.Status.Conditions[0].LastTransitionTime = metav1.NewTime(testNow.Add(-time.Hour + time.Second)) // available in 1s
	f := newFixture(t, class, set, node)
	require.NoError(t, f.sync())
	written := f.status()
	require.EqualValues(t, [2]int32{1, 0}, [2]int32{written.ReadyReplicas, written.AvailableReplicas})
	require.Eventually(t, func() bool { return f.controller.queue.Len() == 1 }, 5*time.Second, 10*time.Millisecond,
		"synced again when the Node becomes available, not minReadySeconds later")

	takenOver := set.DeepCopy()
	takenOver.Status = written
	f = newFixture(t, class, takenOver, node)
	require.NoError(t, f.sync())
	for _, a := range f.nodesets.Actions() {
		require.False(t, a.Matches("update", "nodesets"), "the status was already right")
	}
	assert.Eventually(t, func() bool { return f.controller.queue.Len() == 1 }, 5*time.Second, 10*time.Millisecond,
		"synced again when the Node becomes available")
}

// TestOnlyOutdatedNodesAreCalledReplaced: a Node on the set's delete list
// goes during a rollout too; it is of the current template, so no Event
// says it is an outdated Node being replaced.
func TestOnlyOutdatedNodesAreCalledReplaced(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	current := setNode(t, set, class, "web-current", time.Hour, true)
	outdated := setNode(t, set, class, "web-outdated", 2*time.Hour, false)
	outdated.Labels[nodesetv1alpha1.LabelTemplateHash] = "old"
	set.Annotations = map[string]string{nodesetv1alpha1.AnnotationDeleteNodes: "web-current"}
	f := newFixture(t, class, set, current, outdated)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"web-current", "web-outdated"}, f.nodeDeletes())
	var replacing []string
	for len(f.recorder.Events) > 0 {
		if event := <-f.recorder.Events; strings.Contains(event, ReasonReplacingNode) {
			replacing = append(replacing, event)
		}
	}
	require.Len(t, replacing, 1, "%q", replacing)
	assert.Contains(t, replacing[0], "web-outdated")
}

// TestTheProgressDeadline: a set that works towards its spec records when
// it last progressed; past spec.progressDeadlineSeconds without progress,
// Progressing turns False with reason ProgressDeadlineExceeded. A node
// becoming Ready is progress; a set that is done keeps no time.
func TestTheProgressDeadline(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	res := accepted(t, class, set)
	ready := setNode(t, set, class, "a", time.Hour, true)
	neverReady := setNode(t, set, class, "b", time.Hour, false)
	nodes := []*corev1.Node{ready, neverReady}
	progressing := func(status nodesetv1alpha1.NodeSetStatus) metav1.Condition {
		c := findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
		require.NotNil(t, c)
		return *c
	}

	started := computeStatus(set, res, nodes, nil, testNow)
	require.NotNil(t, started.LastProgressTime, "a set waiting for a node keeps the time")
	assert.Equal(t, testNow.Truncate(time.Second), started.LastProgressTime.Time)
	assert.Equal(t, ReasonWaitingForReady, progressing(started).Reason)

	set.Status = started
	later := testNow.Add(9 * time.Minute)
	waiting := computeStatus(set, res, nodes, nil, later)
	assert.Equal(t, started.LastProgressTime, waiting.LastProgressTime, "nothing progressed")
	assert.Equal(t, ReasonWaitingForReady, progressing(waiting).Reason, "within the deadline")

	late := testNow.Add(10 * time.Minute)
	exceeded := computeStatus(set, res, nodes, nil, late)
	assert.Equal(t, metav1.ConditionFalse, progressing(exceeded).Status)
	assert.Equal(t, ReasonProgressDeadlineExceeded, progressing(exceeded).Reason)
	assert.Equal(t, "no progress for 600s (progressDeadlineSeconds) since "+testNow.UTC().Truncate(time.Second).Format(time.RFC3339)+": 1 of 2 nodes ready",
		progressing(exceeded).Message)
	set.Status = exceeded
	assert.Equal(t, ReasonProgressDeadlineExceeded, progressing(computeStatus(set, res, nodes, nil, late.Add(time.Hour))).Reason, "it stays exceeded")

	// A replacement for the node that never registered is no progress.
	replaced := setNode(t, set, class, "c", time.Minute, false)
	gone := neverReady.DeepCopy()
	gone.DeletionTimestamp = ptr.To(metav1.NewTime(late))
	assert.Equal(t, ReasonProgressDeadlineExceeded, progressing(computeStatus(set, res, []*corev1.Node{ready, gone, replaced}, nil, late)).Reason)

	readyNow := neverReady.DeepCopy()
	readyNow.Status = ready.Status
	progressed := computeStatus(set, res, []*corev1.Node{ready, readyNow}, nil, late)
	assert.Equal(t, ReasonComplete, progressing(progressed).Reason)
	assert.Nil(t, progressed.LastProgressTime, "a set that is done keeps no time")

	set.Status = started
	set.Generation++
	edited := computeStatus(set, res, nodes, nil, late)
	assert.Equal(t, late.Truncate(time.Second), edited.LastProgressTime.Time, "a new generation is progress")
	assert.Equal(t, ReasonWaitingForReady, progressing(edited).Reason)
}

// TestASetIsLookedAtAgainAtItsProgressDeadline: a deadline passes with
// nothing else happening (a machine that never registers, its
// registration timeout far off); the set is synced again then, so that it
// is reported.
func TestASetIsLookedAtAgainAtItsProgressDeadline(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	last := metav1.NewTime(testNow.Add(-595 * time.Second))
	nodes := []*corev1.Node{setNode(t, set, class, "a", time.Hour, true), setNode(t, set, class, "b", time.Hour, false)}
	f := newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	status := f.status()
	require.NotNil(t, status.LastProgressTime)

	set.Status = status
	set.Status.LastProgressTime = &last
	f = newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	assert.Zero(t, f.controller.queue.Len(), "5 s to the deadline")
	require.Eventually(t, func() bool { return f.controller.queue.Len() == 1 }, 30*time.Second, 50*time.Millisecond,
		"the set is queued again at its deadline")
}

// TestAGenerationNotActedOnIsNoProgress: while the set's earlier writes
// are not all observed, its new generation is not claimed, and is no
// progress either: claimed as progress on every sync, it would rewrite
// lastProgressTime each time, and the deadline would never come.
func TestAGenerationNotActedOnIsNoProgress(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	nodes := []*corev1.Node{setNode(t, set, class, "a", time.Hour, true), setNode(t, set, class, "b", time.Hour, false)}
	f := newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	before := f.status()
	require.NotNil(t, before.LastProgressTime)

	edited := set.DeepCopy()
	edited.Generation++
	edited.Status = before
	edited.Status.LastProgressTime = ptr.To(metav1.NewTime(testNow.Add(-time.Minute)))
	f = newFixture(t, class, edited, nodes...)
	f.controller.expectations.expectCreations("team-a/web", 1)
	require.NoError(t, f.sync())
	after := f.status()
	assert.Equal(t, before.ObservedGeneration, after.ObservedGeneration, "the new generation is not acted on yet")
	assert.Equal(t, edited.Status.LastProgressTime, after.LastProgressTime, "nor is it progress")
}

// TestAPausedSetHasNoProgressDeadline: a paused set still scales, and is
// not timed meanwhile (as a paused Deployment is not): it keeps no
// lastProgressTime, and an old one does not make it miss its deadline.
func TestAPausedSetHasNoProgressDeadline(t *testing.T) {
	class := validClass("sim")
	set := newSet(3)
	set.Spec.Paused = true
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	// A group's machines take a while to get their Nodes: ScalingUp.
	res := accepted(t, class, set)
	res.group = true
	nodes := []*corev1.Node{setNode(t, set, class, "a", time.Hour, true)}
	status := computeStatus(set, res, nodes, nil, testNow)
	assert.Equal(t, ReasonScalingUp, findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)
	assert.Nil(t, status.LastProgressTime)

	set.Status = status
	set.Status.LastProgressTime = ptr.To(metav1.NewTime(testNow.Add(-time.Hour))) // from before the pause
	status = computeStatus(set, res, nodes, nil, testNow)
	assert.Equal(t, ReasonScalingUp, findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)
	assert.Nil(t, status.LastProgressTime)
}

// TestAStalledRolloutRunsIntoItsProgressDeadline: a rolling update whose
// creations fail is Stalled; as a Deployment whose pods cannot be made,
// it misses its deadline when that goes on, and a creation that fails now
// and then does not start its clock afresh.
func TestAStalledRolloutRunsIntoItsProgressDeadline(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	nodes := []*corev1.Node{setNode(t, set, class, "web-a", time.Hour, true), setNode(t, set, class, "web-b", time.Hour, true)}
	set.Spec.Template.Labels["tier"] = "frontend" // both outdated
	res := accepted(t, class, set)
	refused := errors.New("nodes is forbidden: exceeded quota")
	progressing := func(status nodesetv1alpha1.NodeSetStatus) metav1.Condition {
		c := findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
		require.NotNil(t, c)
		return *c
	}

	started := computeStatus(set, res, nodes, nil, testNow)
	require.Equal(t, ReasonRollingUpdate, progressing(started).Reason)
	require.NotNil(t, started.LastProgressTime)

	set.Status = started
	stalled := computeStatus(set, res, nodes, refused, testNow.Add(5*time.Minute))
	assert.Equal(t, ReasonStalled, progressing(stalled).Reason)
	assert.Equal(t, started.LastProgressTime, stalled.LastProgressTime, "a failure is no progress")

	set.Status = stalled
	retried := computeStatus(set, res, nodes, nil, testNow.Add(6*time.Minute))
	assert.Equal(t, ReasonRollingUpdate, progressing(retried).Reason)
	assert.Equal(t, started.LastProgressTime, retried.LastProgressTime, "nor is a sync that did not fail")

	set.Status = retried
	exceeded := computeStatus(set, res, nodes, refused, testNow.Add(10*time.Minute))
	assert.Equal(t, metav1.ConditionFalse, progressing(exceeded).Status)
	assert.Equal(t, ReasonProgressDeadlineExceeded, progressing(exceeded).Reason)
	assert.Contains(t, progressing(exceeded).Message, "exceeded quota")
}

// TestTheProgressClockStartsWithNewWork: a set that was done and then
// loses a node's readiness is not timed, as a complete Deployment is not;
// a new template (its class edited, which gives the set no new
// generation) starts the clock as a new generation does.
func TestTheProgressClockStartsWithNewWork(t *testing.T) {
	class := validClass("sim")
	set := newSet(2)
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	res := accepted(t, class, set)
	ready := []*corev1.Node{setNode(t, set, class, "a", time.Hour, true), setNode(t, set, class, "b", time.Hour, true)}
	done := computeStatus(set, res, ready, nil, testNow)
	require.Equal(t, ReasonComplete, findCondition(done.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)
	require.Nil(t, done.LastProgressTime)

	set.Status = done
	lost := []*corev1.Node{ready[0], setNode(t, set, class, "b", time.Hour, false)}
	later := testNow.Add(time.Hour)
	status := computeStatus(set, res, lost, nil, later)
	assert.Equal(t, ReasonWaitingForReady, findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)
	assert.Nil(t, status.LastProgressTime, "a node lost after the set was done is not timed")

	edited := *res
	edited.templateHash = "class-edited"
	status = computeStatus(set, &edited, ready, nil, later)
	assert.Equal(t, ReasonRollingUpdate, findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing).Reason)
	if assert.NotNil(t, status.LastProgressTime, "a new template starts the clock") {
		assert.Equal(t, later.Truncate(time.Second), status.LastProgressTime.Time)
	}
}

// TestAFailedGroupUpdateIsNoCompleteRollout: with strategy Managed the
// cloud group's own update replaces the outdated nodes; once it failed
// (and it is not started again by itself) the set is not Complete, but
// Progressing False with reason GroupUpdateFailed, as long as outdated
// nodes remain.
func TestAFailedGroupUpdateIsNoCompleteRollout(t *testing.T) {
	class := asgClass()
	set := newSet(3)
	set.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
	nodes := []*corev1.Node{setNode(t, set, class, "a", time.Hour, true), setNode(t, set, class, "b", time.Hour, true), setNode(t, set, class, "c", time.Hour, true)}
	nodes[0].Labels[nodesetv1alpha1.LabelTemplateHash] = "old"
	nodes[1].Labels[nodesetv1alpha1.LabelTemplateHash] = "old"
	res := accepted(t, class, set)
	res.group = true
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", UpdateID: "u-1", UpdateStatus: "Failed",
		Message: "update u-1 failed: PodEvictionFailure: Reached max retries while trying to evict pods"}
	progressing := findCondition(computeStatus(set, res, nodes, nil, testNow).Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, progressing)
	assert.Equal(t, metav1.ConditionFalse, progressing.Status)
	assert.Equal(t, ReasonGroupUpdateFailed, progressing.Reason)
	assert.Equal(t, "1 of 3 nodes updated, 2 outdated: update u-1 of cloud group ng is Failed", progressing.Message)

	set.Status.Group.UpdateStatus = "Successful"
	progressing = findCondition(computeStatus(set, res, nodes, nil, testNow).Conditions, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, ReasonComplete, progressing.Reason, "a successful update leaves the outdated nodes to their deletion")

	set.Status.Group.UpdateStatus = "Cancelled"
	for _, n := range nodes {
		n.Labels[nodesetv1alpha1.LabelTemplateHash] = res.templateHash
	}
	progressing = findCondition(computeStatus(set, res, nodes, nil, testNow).Conditions, nodesetv1alpha1.NodeSetProgressing)
	assert.Equal(t, ReasonComplete, progressing.Reason, "no outdated node left: nothing waits for the update")
}

// TestAManagedRolloutIsNotCompleteBeforeTheGroupTakesTheTemplate: with
// strategy Managed the cloud group takes the set's edit itself, and until
// it reports the set's template (status.group.templateHash) the rollout
// has not begun: Progressing says GroupUpdating, not Complete, also in the
// moment before the group reports an update. A group that does not say
// which template it has (eks-asg) or whose update failed is judged as
// before.
func TestAManagedRolloutIsNotCompleteBeforeTheGroupTakesTheTemplate(t *testing.T) {
	class := asgClass()
	set := newSet(2)
	set.Spec.Strategy.Type = nodesetv1alpha1.ManagedStrategy
	nodes := []*corev1.Node{setNode(t, set, class, "a", time.Hour, true), setNode(t, set, class, "b", time.Hour, true)}
	for _, n := range nodes {
		n.Labels[nodesetv1alpha1.LabelTemplateHash] = "old"
	}
	res := accepted(t, class, set)
	res.group = true
	reason := func() (string, string) {
		p := findCondition(computeStatus(set, res, nodes, nil, testNow).Conditions, nodesetv1alpha1.NodeSetProgressing)
		require.NotNil(t, p)
		return p.Reason, p.Message
	}

	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: "old"}
	r, msg := reason()
	assert.Equal(t, ReasonGroupUpdating, r)
	assert.Equal(t, "cloud group ng is at template old, not yet at "+res.templateHash, msg)

	set.Status.Group.Message = "NodeCreationFailure: instances failed to join"
	_, msg = reason()
	assert.Equal(t, "cloud group ng is at template old, not yet at "+res.templateHash+": NodeCreationFailure: instances failed to join", msg,
		"what the group reports is said with it")

	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: res.templateHash}
	r, msg = reason()
	assert.Equal(t, ReasonComplete, r, "the group at the template, its update done: the outdated nodes stay until deleted")
	assert.Contains(t, msg, "2 outdated, replaced when deleted")

	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE"}
	r, _ = reason()
	assert.Equal(t, ReasonComplete, r, "a group that does not say its template is judged by its nodes")

	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: "old", UpdateID: "u-1", UpdateStatus: "Failed"}
	r, _ = reason()
	assert.Equal(t, ReasonGroupUpdateFailed, r, "a failed update is said as such")

	refusal := "updating the version of node group ng: invalid configuration: InvalidParameterException: version 1.99 is above the cluster's"
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: "old", RefusedTemplateHash: res.templateHash, Message: refusal}
	r, msg = reason()
	assert.Equal(t, ReasonGroupUpdateFailed, r, "a change the cloud refused is no rollout to wait for")
	assert.Equal(t, "0 of 2 nodes updated, 2 outdated: cloud group ng refused the change to template "+res.templateHash+": "+refusal, msg)
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: "old", RefusedTemplateHash: "earlier", Message: refusal}
	r, _ = reason()
	assert.Equal(t, ReasonGroupUpdating, r, "the refusal of an earlier template says nothing of the current one, not tried yet")
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", RefusedTemplateHash: res.templateHash, Message: refusal}
	r, _ = reason()
	assert.Equal(t, ReasonGroupUpdateFailed, r, "a group that does not say its template: its outdated nodes")
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: res.templateHash, RefusedTemplateHash: res.templateHash, Message: refusal}
	r, _ = reason()
	assert.Equal(t, ReasonComplete, r, "a refusal of something else once the group is at the template")

	set.Spec.Strategy.Type = nodesetv1alpha1.OnDeleteStrategy
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: "old"}
	r, _ = reason()
	assert.Equal(t, ReasonComplete, r, "OnDelete: the group's template is not the rollout's")
	set.Status.Group = &nodesetv1alpha1.GroupStatus{Name: "ng", State: "ACTIVE", TemplateHash: "old", RefusedTemplateHash: res.templateHash, Message: refusal}
	r, _ = reason()
	assert.Equal(t, ReasonComplete, r, "OnDelete: no rollout fails")
}

// accepted is the resolution of an accepted set of class.
func accepted(t *testing.T, class *nodesetv1alpha1.NodeClass, set *nodesetv1alpha1.NodeSet) *resolution {
	t.Helper()
	spec, err := resolve.EffectiveSpec(class, set)
	require.NoError(t, err)
	return &resolution{class: class, effective: spec, templateHash: resolve.TemplateHash(&spec, set),
		accepted: metav1.Condition{Type: nodesetv1alpha1.NodeSetAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted}}
}

// TestARolloutWaitingForRoomIsARollout: a class whose limits leave no
// room for the surge holds a rollout (maxUnavailable 0) until room comes:
// another set's machine goes, or the admin raises the limit. The set says
// LimitExceeded in Accepted, but it is not refused as an invalid set is:
// Progressing stays the rollout's, names the limit, and runs into the
// progress deadline, as a Deployment's does when a quota refuses its new
// pods (kubernetes pkg/controller/deployment/progress.go: a Deployment
// keeps Progressing until progressDeadlineSeconds passes, then
// ProgressDeadlineExceeded).
func TestARolloutWaitingForRoomIsARollout(t *testing.T) {
	class := validClass("sim")
	class.Spec.Limits = &nodesetv1alpha1.NodeClassLimits{MaxNodes: ptr.To[int32](2)}
	set := newSet(2)
	set.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	nodes := []*corev1.Node{setNode(t, set, class, "web-a", time.Hour, true), setNode(t, set, class, "web-b", time.Hour, true)}
	set.Spec.Template.Labels["tier"] = "frontend" // both outdated
	f := newFixture(t, class, set, nodes...)
	require.NoError(t, f.sync())
	assert.Empty(t, f.nodeCreates(), "no room for the surge")
	assert.Empty(t, f.nodeDeletes(), "maxUnavailable 0: no outdated node goes first")

	status := f.status()
	limit := findCondition(status.Conditions, nodesetv1alpha1.NodeSetAccepted)
	require.NotNil(t, limit)
	assert.Equal(t, ReasonLimitExceeded, limit.Reason)
	progressing := findCondition(status.Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, progressing)
	assert.Equal(t, metav1.ConditionTrue, progressing.Status)
	assert.Equal(t, ReasonRollingUpdate, progressing.Reason, progressing.Message)
	assert.Contains(t, progressing.Message, limit.Message, "the rollout says what it waits for")
	require.NotNil(t, status.LastProgressTime, "the rollout is timed")

	set.Status = status
	res := accepted(t, class, set)
	res.accepted = *limit
	late := computeStatus(set, res, nodes, nil, testNow.Add(11*time.Minute))
	exceeded := findCondition(late.Conditions, nodesetv1alpha1.NodeSetProgressing)
	require.NotNil(t, exceeded)
	assert.Equal(t, ReasonProgressDeadlineExceeded, exceeded.Reason, exceeded.Message)
	assert.Contains(t, exceeded.Message, limit.Message)
}
