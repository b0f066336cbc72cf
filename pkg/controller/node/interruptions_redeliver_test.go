package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// redeliveringQueue is an interruption source whose queue holds one
// notice, and records when it is asked to give a notice again sooner.
type redeliveringQueue struct {
	*recordingSource
	notice drivers.Interruption

	mu    sync.Mutex
	asked map[string]time.Duration // by receipt
	acked []string
}

func (q *redeliveringQueue) ReceiveInterruptions(context.Context, drivers.Class) ([]drivers.Interruption, error) {
	return []drivers.Interruption{q.notice}, nil
}

func (q *redeliveringQueue) AckInterruptions(_ context.Context, _ drivers.Class, receipts []string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.acked = append(q.acked, receipts...)
	return nil
}

func (q *redeliveringQueue) RedeliverInterruption(_ context.Context, _ drivers.Class, receipt string, after time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.asked[receipt] = after
	return nil
}

// TestANoticeDrainingAKubeletsNodeComesAgainBeforeItsHeartbeatIsDue: a
// lifecycle action whose instance has a Node that is none of a NodeSet's
// replicas is drained through its notice's deliveries, each heartbeating
// the action once half the hook's heartbeat timeout has passed. Auto
// Scaling lets the instance go when a heartbeat timeout passes without a
// heartbeat (PutLifecycleHook allows 30 s), which may be shorter than the
// queue's visibility timeout: the notice is asked to come again within a
// quarter of the timeout, so that no two heartbeats are more than three
// quarters of it apart; it is not acknowledged while the Node drains.
func TestANoticeDrainingAKubeletsNodeComesAgainBeforeItsHeartbeatIsDue(t *testing.T) {
	const instance = "i-0kubelet"
	providerID := "aws:///us-east-1a/" + instance
	kubeletNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-0-1", UID: "uid-kubelet"},
		Spec: corev1.NodeSpec{ProviderID: providerID}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-a"}, Spec: corev1.PodSpec{NodeName: kubeletNode.Name}}
	f := newFixture(t, []*nodesetv1alpha1.NodeClass{queuedClass("spot")}, kubeletNode, pod)
	f.onEviction(func() error { return nil }) // accepted; the pod takes its time to go

	groups := newGroupDriver()
	groups.groups["g"] = &drivers.GroupStatus{Name: "g", State: "ACTIVE", DesiredSize: 1, Machines: []drivers.MachineStatus{
		{Name: kubeletNode.Name, ProviderID: providerID, State: drivers.MachineRunning}}}
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"},
		Spec:   nodesetv1alpha1.NodeSetSpec{NodeClassName: "spot"},
		Status: nodesetv1alpha1.NodeSetStatus{Group: &nodesetv1alpha1.GroupStatus{Name: "g"}}}
	require.NoError(t, f.setIndexer.Add(set))

	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		want      time.Duration
	}{
		{name: "the shortest timeout Auto Scaling allows", heartbeat: 30 * time.Second, want: 7500 * time.Millisecond},
		{name: "an hour", heartbeat: time.Hour, want: 15 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queue := &redeliveringQueue{recordingSource: &recordingSource{}, asked: map[string]time.Duration{},
				notice: drivers.Interruption{Receipt: "r-" + tc.name, ID: "m-1", Kind: drivers.InterruptionTermination, MachineIDs: []string{instance},
					Notice: testNow, Deadline: testNow.Add(5 * time.Minute),
					Lifecycle: &drivers.LifecycleAction{Group: "g", Hook: "nodeset-termination", Token: "t", MachineID: instance, HeartbeatTimeout: tc.heartbeat}}}
			f.controller.registry[nodesetv1alpha1.DriverEKSASG] = struct {
				*recordingGroupDriver
				*redeliveringQueue
			}{groups, queue}

			assert.Equal(t, consumeOK, f.controller.consumeOnce(context.Background(), "spot", nil))
			assert.True(t, f.get(kubeletNode.Name).Spec.Unschedulable, "the Node is cordoned and drained")
			assert.Zero(t, queue.completed, "the action waits for the drain")
			assert.Empty(t, queue.acked, "the notice stays on the queue while the Node drains")
			assert.Equal(t, map[string]time.Duration{queue.notice.Receipt: tc.want}, queue.asked,
				"the notice comes again within a quarter of the heartbeat timeout")
		})
	}
}
