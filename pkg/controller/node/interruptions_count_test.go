package node

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestOnlyNoticesNamingAMachineAreCountedAsReceived: an instance's state
// change to pending or running names no machine to act on (ParseEvent),
// nor does a scheduled change that is over; neither is counted as an
// interruption notice received.
func TestOnlyNoticesNamingAMachineAreCountedAsReceived(t *testing.T) {
	ctx := context.Background()
	f := newQueueFixture(t, groupNode("mine", nodesetv1alpha1.DriverEKSASG, "i-0aaa"))
	for _, n := range []drivers.Interruption{
		{ID: "running", Kind: drivers.InterruptionStateChange, Notice: testNow, Deadline: testNow, Detail: "running"},
		{ID: "closed", Kind: drivers.InterruptionScheduled, Notice: testNow, Deadline: testNow, Detail: "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED"},
	} {
		require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, n, newEarlyWarnings(maxEarlyWarnings)))
	}
	assert.Zero(t, f.receivedNotices(drivers.InterruptionStateChange))
	assert.Zero(t, f.receivedNotices(drivers.InterruptionScheduled))

	stopping := drivers.Interruption{ID: "stopping", Kind: drivers.InterruptionStateChange, MachineIDs: []string{"i-0aaa"}, Notice: testNow, Deadline: testNow, Detail: "stopping"}
	require.NoError(t, f.controller.handleInterruption(ctx, nodesetv1alpha1.DriverEKSASG, testQueue, stopping, newEarlyWarnings(maxEarlyWarnings)))
	assert.Equal(t, 1.0, f.receivedNotices(drivers.InterruptionStateChange), "a state change that ends a machine is counted")
}
