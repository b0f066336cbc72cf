package node

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

func TestInterruptionRecordKeepsTheFirstNoticeAndTheEarliestDeadline(t *testing.T) {
	at := testNow
	spot := drivers.Interruption{Kind: drivers.InterruptionSpot, Notice: at, Deadline: at.Add(2 * time.Minute)}
	rec := interruptionRecord{}.merged(spot)
	assert.Equal(t, drivers.InterruptionSpot, rec.Kind)
	assert.Equal(t, at.Add(2*time.Minute), *rec.Deadline)

	action := &drivers.LifecycleAction{Group: "g", Hook: "h", Token: "t", MachineID: "i-1"}
	later := rec.merged(drivers.Interruption{Kind: drivers.InterruptionTermination, Notice: at.Add(time.Minute), Deadline: at.Add(time.Hour), Lifecycle: action})
	assert.Equal(t, drivers.InterruptionSpot, later.Kind, "the first notice stays")
	assert.Equal(t, at.Add(2*time.Minute), *later.Deadline, "the earliest deadline wins")
	assert.Equal(t, action, later.Lifecycle, "a lifecycle action is kept once it comes")
	assert.True(t, recordsEqual(later, later.merged(drivers.Interruption{Kind: drivers.InterruptionSpot, Notice: at, Deadline: at.Add(2 * time.Minute)})),
		"the same notice again changes nothing")

	policy := drainPolicy{timeout: 10 * time.Minute, onTimeout: nodesetv1alpha1.DrainTimeoutCordon}
	capped := rec.capped(policy, at.Add(10*time.Second))
	assert.Equal(t, 110*time.Second, capped.timeout, "the drain ends at the deadline")
	assert.Equal(t, nodesetv1alpha1.DrainTimeoutDeprovision, capped.onTimeout, "AWS takes the machine anyway")
	hooked := interruptionRecord{}.merged(drivers.Interruption{Kind: drivers.InterruptionTermination, Notice: at, Deadline: at.Add(time.Hour), Lifecycle: action})
	assert.Equal(t, time.Hour, hooked.capped(policy, at).timeout, "a lifecycle action waits up to maxDrainTime, beyond the drain timeout")
}

// groupNode is a Node of a group driver's machine.
func groupNode(name, driver, instance string) *corev1.Node {
	node := setNode(name, "spot")
	node.Spec.ProviderID = "aws:///us-east-1a/" + instance
	node.Annotations = map[string]string{nodesetv1alpha1.AnnotationDriver: driver, nodesetv1alpha1.AnnotationGroup: "g"}
	return node
}

func TestInterruptionNoticesActOnlyOnTheirDriversNodes(t *testing.T) {
	mine := groupNode("mine", nodesetv1alpha1.DriverEKSASG, "i-0aaa")
	managed := groupNode("managed", nodesetv1alpha1.DriverEKSManaged, "i-0bbb")
	f := newQueueFixture(t, mine, managed)
	ctx := context.Background()
	warn := func(instance string) drivers.Interruption {
		return drivers.Interruption{Kind: drivers.InterruptionSpot, MachineIDs: []string{instance}, Notice: testNow, Deadline: testNow.Add(2 * time.Minute)}
	}

	early := newEarlyWarnings(maxEarlyWarnings)
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warn("i-0bbb"), early), errKeptEarly,
		"kept for a Node of the driver that may yet appear")
	assert.Empty(t, f.get("managed").Annotations[nodesetv1alpha1.AnnotationInterruption], "an EKS managed node group's instance is EKS's to drain")

	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warn("i-0aaa"), early))
	_, err := f.kube.CoreV1().Nodes().Get(ctx, "mine", metav1.GetOptions{})
	assert.Error(t, err, "the fake deletes at once: the Node went through deletion")
	writes := len(f.kube.Actions())
	require.ErrorIs(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, warn("i-0ccc"), early), errKeptEarly)
	assert.Equal(t, writes, len(f.kube.Actions()), "a machine of no Node costs no write")
	f.controller.actOnEarlyWarnings(ctx, early)
	assert.Equal(t, writes, len(f.kube.Actions()), "nor while it is kept for a Node of the driver that may yet appear")
	assert.Empty(t, f.get("managed").Annotations[nodesetv1alpha1.AnnotationInterruption], "another driver's Node is never that Node")
}

// recordingSource records the lifecycle calls of an InterruptionSource.
// Every class of its driver reads its queue "q" (testQueue).
type recordingSource struct{ beats, completed int }

func (*recordingSource) InterruptionQueue(drivers.Class) string { return "q" }
func (*recordingSource) ReceiveInterruptions(context.Context, drivers.Class) ([]drivers.Interruption, error) {
	return nil, nil
}
func (*recordingSource) AckInterruptions(context.Context, drivers.Class, []string) error { return nil }
func (s *recordingSource) CompleteLifecycleAction(context.Context, drivers.Class, drivers.LifecycleAction) error {
	s.completed++
	return nil
}
func (s *recordingSource) RecordLifecycleHeartbeat(context.Context, drivers.Class, drivers.LifecycleAction) error {
	s.beats++
	return nil
}

// LifecycleDeadline lets a machine drain for its class's drain timeout.
func (*recordingSource) LifecycleDeadline(class drivers.Class, notice time.Time, _ time.Duration) time.Time {
	return notice.Add(class.Spec.Drain.Timeout.Duration)
}

// LifecycleHeartbeatTimeout is heartbeat when known, else a tenth of the
// class's drain timeout.
func (*recordingSource) LifecycleHeartbeatTimeout(class drivers.Class, heartbeat time.Duration) time.Duration {
	if heartbeat > 0 {
		return heartbeat
	}
	return class.Spec.Drain.Timeout.Duration / 10
}

// groupSource is a group driver whose cloud sends interruption notices.
type groupSource struct {
	*recordingDriver
	*recordingSource
}

// testQueue is the queue (a queueName) of the classes of the eks-asg
// driver when recordingSource is its interruption source.
const testQueue = nodesetv1alpha1.DriverEKSASG + " q"

// queuedClass is a class of the eks-asg driver, which reads testQueue
// when recordingSource is the driver's interruption source.
func queuedClass(name string) *nodesetv1alpha1.NodeClass {
	class := testClass(name)
	class.Spec.Driver = nodesetv1alpha1.DriverEKSASG
	return class
}

// newQueueFixture is a fixture whose eks-asg driver is an interruption
// source, with the class spot of groupNode's Nodes reading testQueue.
func newQueueFixture(t *testing.T, objects ...runtime.Object) *fixture {
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{queuedClass("spot")}, objects...)
	f.controller.registry[nodesetv1alpha1.DriverEKSASG] = groupSource{newRecordingDriver(nodesetv1alpha1.DriverEKSASG), &recordingSource{}}
	return f
}

// TestLifecycleDeadlineIsTheMachinesClass: a queue shared by classes of
// different drain times is read with one of them; the deadline of a
// machine's lifecycle action is set by the class of its own Node.
func TestLifecycleDeadlineIsTheMachinesClass(t *testing.T) {
	long := queuedClass("long")
	long.Spec.Drain.Timeout.Duration = 30 * time.Minute
	node := groupNode("draining", nodesetv1alpha1.DriverEKSASG, "i-0aaa")
	node.Labels[nodesetv1alpha1.LabelNodeClass] = "long"
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{long}, node)
	f.controller.registry[nodesetv1alpha1.DriverEKSASG] = groupSource{newRecordingDriver(nodesetv1alpha1.DriverEKSASG), &recordingSource{}}
	notice := drivers.Interruption{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0aaa"}, Notice: testNow,
		Deadline:  testNow.Add(time.Minute), // as the queue's first class, of 1 minute, read it
		Lifecycle: &drivers.LifecycleAction{Group: "g", Hook: "h", Token: "t", MachineID: "i-0aaa", HeartbeatTimeout: time.Minute}}
	require.NoError(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, testQueue, notice, nil))
	recorded := lastRecordedInterruption(t, f)
	require.NotNil(t, recorded, "the notice is recorded on the Node")
	require.NotNil(t, recorded.Deadline)
	assert.Equal(t, testNow.Add(30*time.Minute).UTC(), recorded.Deadline.UTC(), "the Node's class drains for 30 minutes")
}

func TestLifecycleActionIsKeptWaitingEveryHalfHeartbeatTimeout(t *testing.T) {
	node := groupNode("draining", nodesetv1alpha1.DriverEKSASG, "i-0aaa")
	f := newFixture(t, nil, node)
	rec := interruptionRecord{Kind: drivers.InterruptionTermination, Notice: testNow,
		Lifecycle: &drivers.LifecycleAction{Group: "g", Hook: "h", Token: "t", MachineID: "i-0aaa", HeartbeatTimeout: time.Minute}}
	source := &recordingSource{}
	for _, step := range []struct {
		after time.Duration
		beats int
	}{{20 * time.Second, 0}, {31 * time.Second, 1}, {50 * time.Second, 1}, {62 * time.Second, 2}} {
		f.now = testNow.Add(step.after)
		require.NoError(t, f.controller.lifecycleHeartbeat(context.Background(), node, rec, source, drivers.Class{}))
		assert.Equal(t, step.beats, source.beats, "after %s", step.after)
	}
	assert.Zero(t, source.completed, "heartbeats never complete the action")

	f.controller.opts.MayAct = func() error { return assert.AnError }
	f.now = testNow.Add(5 * time.Minute)
	require.Error(t, f.controller.lifecycleHeartbeat(context.Background(), node, rec, source, drivers.Class{}))
	assert.Equal(t, 2, source.beats, "a replica that may not lead keeps nothing waiting")
}

// panickingSource is an interruption source whose receive panics.
type panickingSource struct{ *recordingSource }

func (panickingSource) ReceiveInterruptions(context.Context, drivers.Class) ([]drivers.Interruption, error) {
	panic("driver bug: nil message body")
}

// TestAPanickingQueueReadIsAFailedRound: a driver's panic while reading
// its queue is a round to retry with backoff, not the end of the process.
func TestAPanickingQueueReadIsAFailedRound(t *testing.T) {
	class := testClass("spot")
	class.Spec.Driver = nodesetv1alpha1.DriverEKSASG
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{class})
	f.controller.registry[nodesetv1alpha1.DriverEKSASG] = struct {
		*recordingDriver
		panickingSource
	}{newRecordingDriver(nodesetv1alpha1.DriverEKSASG), panickingSource{&recordingSource{}}}
	var outcome consumeOutcome
	require.NotPanics(t, func() { outcome = f.controller.consumeOnce(context.Background(), "spot", nil) })
	assert.Equal(t, consumeFailed, outcome)
}

// TestAnInterruptionFindsItsNodeAmongThoseSharingTheMachineID: a kubelet's
// own Node (even one labelled and annotated as the set's), or another
// driver's, may carry the machine id of a NodeSet's Node. The notice drains
// the NodeSet's Node, whichever of them the index gives first, and leaves
// the others alone.
func TestAnInterruptionFindsItsNodeAmongThoseSharingTheMachineID(t *testing.T) {
	var objects []runtime.Object
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("i-0dup%02d", i)
		ids = append(ids, id)
		kubelets := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ip-10-0-0-%d.ec2.internal", i), UID: types.UID("uid-kubelet-" + id)},
			Spec: corev1.NodeSpec{ProviderID: "aws:///us-east-1a/" + id}}
		// A kubelet's own Node registered with the set's labels, the
		// group's annotations and the instance's providerID, but not held;
		// its name comes first.
		forged := groupNode(fmt.Sprintf("a-forged-%02d", i), nodesetv1alpha1.DriverEKSASG, id)
		forged.Finalizers = nil
		objects = append(objects, kubelets, forged,
			groupNode(fmt.Sprintf("managed-%02d", i), nodesetv1alpha1.DriverEKSManaged, id),
			groupNode(fmt.Sprintf("mine-%02d", i), nodesetv1alpha1.DriverEKSASG, id))
	}
	f := newQueueFixture(t, objects...)
	ctx := context.Background()
	notice := drivers.Interruption{Kind: drivers.InterruptionSpot, MachineIDs: ids, Notice: testNow, Deadline: testNow.Add(2 * time.Minute)}
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, notice, nil))
	for i := range 12 {
		_, err := f.kube.CoreV1().Nodes().Get(ctx, fmt.Sprintf("mine-%02d", i), metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "mine-%02d is interrupted (the fake deletes at once)", i)
		assert.Empty(t, f.get(fmt.Sprintf("managed-%02d", i)).Annotations[nodesetv1alpha1.AnnotationInterruption], "another driver's Node")
		assert.Empty(t, f.get(fmt.Sprintf("ip-10-0-0-%d.ec2.internal", i)).Annotations[nodesetv1alpha1.AnnotationInterruption], "the kubelet's own Node")
		assert.Empty(t, f.get(fmt.Sprintf("a-forged-%02d", i)).Annotations[nodesetv1alpha1.AnnotationInterruption], "a kubelet's Node labelled as the set's")
	}
}

// terminationHook is a group driver whose TerminateMachine first runs a
// hook: the cloud's lifecycle notice, set off by the termination.
type terminationHook struct {
	*recordingGroupDriver
	*recordingSource
	onTerminate func()
}

func (d terminationHook) TerminateMachine(ctx context.Context, class drivers.Class, group, providerID string) error {
	d.onTerminate()
	return d.recordingGroupDriver.TerminateMachine(ctx, class, group, providerID)
}

// TestALifecycleActionRecordedWhileTheNodeIsReleasedIsCompleted: the
// termination of a drained Node sets off the group's lifecycle hook, whose
// notice is recorded on the Node after its sync read it and before the
// sync releases it. The action is still completed, by the time the notice
// is acknowledged at the latest, instead of waiting out the hook's
// heartbeat timeout.
func TestALifecycleActionRecordedWhileTheNodeIsReleasedIsCompleted(t *testing.T) {
	g := newGroupFixture(t, 1)
	require.NoError(t, g.syncGroup())
	groupName := g.group.ensured[0].Name
	require.NotNil(t, g.getSet().Status.Group)
	require.Equal(t, groupName, g.getSet().Status.Group.Name)
	class := asgTestClass()
	class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 30 * time.Minute}}
	require.NoError(t, g.classIndexer.Update(class))
	source := &recordingSource{}
	ctx := context.Background()
	notice := drivers.Interruption{Receipt: "r-1", ID: "m-1", Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-100"}, Notice: testNow,
		Lifecycle: &drivers.LifecycleAction{Group: groupName, Hook: "drain", Token: "t-1", MachineID: "i-100", HeartbeatTimeout: time.Hour}}
	acked := false
	deliver := func() {
		acked = g.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, notice, nil) == nil
	}
	g.controller.registry = drivers.Registry{nodesetv1alpha1.DriverEKSASG: terminationHook{g.group, source, deliver}}

	node := g.get("ip-100")
	node.DeletionTimestamp = &metav1.Time{Time: testNow}
	_, err := g.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	g.updateCache(g.get("ip-100"))
	require.NoError(t, g.sync("ip-100")) // cordon, drain, terminate (the notice comes), release
	released := g.get("ip-100")
	require.NotContains(t, released.Finalizers, nodesetv1alpha1.FinalizerTermination)
	require.NotEmpty(t, released.Annotations[nodesetv1alpha1.AnnotationInterruption], "the notice was recorded before the release")
	// The API server deletes a deleted Node once its last finalizer is off.
	require.NoError(t, g.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("nodes"), "", "ip-100"))
	g.deleteCache("ip-100")

	for delivery := 0; !acked && delivery < 3; delivery++ {
		deliver() // not acknowledged: the queue gives it again
	}
	assert.True(t, acked, "the notice is acknowledged in the end")
	assert.Equal(t, 1, source.completed, "the lifecycle action is completed once the Node is released")
}

// lastRecordedInterruption is the interruption record the last patch of a
// Node that wrote one put in its annotation, or nil.
func lastRecordedInterruption(t *testing.T, f *fixture) *interruptionRecord {
	t.Helper()
	var recorded *interruptionRecord
	for _, action := range f.kube.Actions() {
		if patch, ok := action.(core.PatchAction); ok && action.GetResource().Resource == "nodes" {
			var body struct {
				Metadata struct{ Annotations map[string]string } `json:"metadata"`
			}
			require.NoError(t, json.Unmarshal(patch.GetPatch(), &body))
			if raw := body.Metadata.Annotations[nodesetv1alpha1.AnnotationInterruption]; raw != "" {
				recorded = &interruptionRecord{}
				require.NoError(t, json.Unmarshal([]byte(raw), recorded))
			}
		}
	}
	return recorded
}
