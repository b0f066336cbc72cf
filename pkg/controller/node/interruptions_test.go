package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	f := newFixture(t, nil, mine, managed)
	ctx := context.Background()
	warn := func(instance string) drivers.Interruption {
		return drivers.Interruption{Kind: drivers.InterruptionSpot, MachineIDs: []string{instance}, Notice: testNow, Deadline: testNow.Add(2 * time.Minute)}
	}

	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, warn("i-0bbb")))
	assert.Empty(t, f.get("managed").Annotations[nodesetv1alpha1.AnnotationInterruption], "an EKS managed node group's instance is EKS's to drain")

	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, warn("i-0aaa")))
	_, err := f.kube.CoreV1().Nodes().Get(ctx, "mine", metav1.GetOptions{})
	assert.Error(t, err, "the fake deletes at once: the Node went through deletion")
	writes := len(f.kube.Actions())
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, warn("i-0ccc")))
	assert.Equal(t, writes, len(f.kube.Actions()), "a machine of no Node costs no write")
}

// recordingSource records the lifecycle calls of an InterruptionSource.
type recordingSource struct{ beats, completed int }

func (*recordingSource) InterruptionQueue(drivers.Class) string { return "" }
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

// groupSource is a group driver whose cloud sends interruption notices.
type groupSource struct {
	*recordingDriver
	*recordingSource
}

// TestLifecycleDeadlineIsTheMachinesClass: a queue shared by classes of
// different drain times is read with one of them; the deadline of a
// machine's lifecycle action is set by the class of its own Node.
func TestLifecycleDeadlineIsTheMachinesClass(t *testing.T) {
	long := testClass("long")
	long.Spec.Drain.Timeout.Duration = 30 * time.Minute
	node := groupNode("draining", nodesetv1alpha1.DriverEKSASG, "i-0aaa")
	node.Labels[nodesetv1alpha1.LabelNodeClass] = "long"
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{long}, node)
	f.controller.registry[nodesetv1alpha1.DriverEKSASG] = groupSource{newRecordingDriver(nodesetv1alpha1.DriverEKSASG), &recordingSource{}}
	notice := drivers.Interruption{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0aaa"}, Notice: testNow,
		Deadline:  testNow.Add(time.Minute), // as the queue's first class, of 1 minute, read it
		Lifecycle: &drivers.LifecycleAction{Group: "g", Hook: "h", Token: "t", MachineID: "i-0aaa", HeartbeatTimeout: time.Minute}}
	require.NoError(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, notice))
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
	require.NotPanics(t, func() { outcome = f.controller.consumeOnce(context.Background(), "spot") })
	assert.Equal(t, consumeFailed, outcome)
}
