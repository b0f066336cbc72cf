package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestALifecycleActionWhoseHookWasNotReadIsTimedByTheNodesClass: a notice
// read when its group's hook could not be looked up carries no heartbeat
// timeout; the Node's own class gives it, not the class the queue was read
// with. A timeout read from the hook stays.
func TestALifecycleActionWhoseHookWasNotReadIsTimedByTheNodesClass(t *testing.T) {
	for _, tc := range []struct {
		name            string
		heartbeat, want time.Duration
	}{
		{name: "not read", want: 3 * time.Minute}, // recordingSource: a tenth of the class's 30-minute drain timeout
		{name: "read from the hook", heartbeat: time.Minute, want: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long := queuedClass("long")
			long.Spec.Drain.Timeout.Duration = 30 * time.Minute
			node := groupNode("draining", nodesetv1alpha1.DriverEKSASG, "i-0aaa")
			node.Labels[nodesetv1alpha1.LabelNodeClass] = "long"
			f := newFixture(t, []*nodesetv1alpha1.NodeClass{long}, node)
			f.controller.registry[nodesetv1alpha1.DriverEKSASG] = groupSource{newRecordingDriver(nodesetv1alpha1.DriverEKSASG), &recordingSource{}}
			notice := drivers.Interruption{Kind: drivers.InterruptionTermination, MachineIDs: []string{"i-0aaa"}, Notice: testNow,
				Deadline:  testNow.Add(time.Minute),
				Lifecycle: &drivers.LifecycleAction{Group: "g", Hook: "h", Token: "t", MachineID: "i-0aaa", HeartbeatTimeout: tc.heartbeat}}
			require.NoError(t, f.controller.handleInterruption(context.Background(), nodesetv1alpha1.DriverEKSASG, testQueue, notice, nil))
			recorded := lastRecordedInterruption(t, f)
			require.NotNil(t, recorded)
			require.NotNil(t, recorded.Lifecycle)
			assert.Equal(t, tc.want, recorded.Lifecycle.HeartbeatTimeout)
			assert.Equal(t, tc.heartbeat, notice.Lifecycle.HeartbeatTimeout, "the notice itself is not changed")
		})
	}
}
