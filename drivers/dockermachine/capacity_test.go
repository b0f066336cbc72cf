package dockermachine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

func TestOutOfCapacityReadsTheCloudsWords(t *testing.T) {
	for text, want := range map[string]bool{
		// As rancher/machine's amazonec2 quotes the AWS SDK's error.
		"Error launching instance: InsufficientInstanceCapacity: We currently do not have sufficient m5.large capacity in the Availability Zone you requested (us-east-1a).\n\tstatus code: 500, request id: 0f": true,
		"Error launching instance: VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit of 32 allows":                                                                           true,
		"googleapi: Error 403: ZONE_RESOURCE_POOL_EXHAUSTED: The zone 'projects/p/zones/us-central1-a' does not have enough resources":                                                                           true,
		"code: ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS, message: The zone does not have enough resources available":                                                                                            true,
		"Operation failed: [{QUOTA_EXCEEDED Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1}]":                                                                                                          true,
		"compute.VirtualMachinesClient#CreateOrUpdate: Code=\"AllocationFailed\" Message=\"Allocation failed.\"":                                                                                                 true,
		"Error creating machine: No valid host was found. There are not enough hosts available.":                                                                                                                 true,
		"fake: out of machines":                              false,
		"InvalidAMIID.NotFound: The image id does not exist": false,
		"the disk has insufficient capacity":                 false, // the words, not the code
		"MyInsufficientInstanceCapacityCheck failed":         false, // inside a longer identifier
		"RESOURCE_POOL_EXHAUSTED_SOON":                       false,
		"":                                                   false,
	} {
		assert.Equal(t, want, outOfCapacity(text), text)
	}
}

// TestACloudOutOfRoomIsOutOfCapacity: a plugin whose cloud answers that it
// has no room fails the create as out of capacity (cluster-autoscaler
// backs the group off); any other failure does not say so.
func TestACloudOutOfRoomIsOutOfCapacity(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	full := fakeClass(dir, map[string]string{"fake-fail-create-no-room": "true"})
	_, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: full})
	require.Error(t, err)
	assert.ErrorIs(t, err, drivers.ErrOutOfCapacity)
	assert.Contains(t, err.Error(), "plugin docker-machine-driver-fake creating machine m1: out of capacity: Error launching instance: InsufficientInstanceCapacity")

	_, err = d.Create(ctx, drivers.Machine{Name: "m2", Class: fakeClass(dir, map[string]string{"fake-fail-create": "true"})})
	require.ErrorContains(t, err, "fake: out of machines")
	assert.NotErrorIs(t, err, drivers.ErrOutOfCapacity)
	machines, _ := fakeplugin.Machines(dir)
	assert.Empty(t, machines, "neither failed create left a machine")
	assertNoPluginLeft(t)
}
