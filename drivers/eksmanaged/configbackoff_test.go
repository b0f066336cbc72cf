package eksmanaged

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
)

// TestAFailedConfigurationUpdateBacksOff: a configuration update EKS
// reports Failed is asked again after a backoff that grows with each
// failure of the same spec (kept on the node group, so a restarted driver
// keeps it too), not on every look, each of which made a new failed
// update. Meanwhile its errors stay in the status. A change of the spec
// that asks it is asked at once, and once the configuration is in step
// the record goes.
func TestAFailedConfigurationUpdateBacksOff(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	d.opts.Now = func() time.Time { return now }
	fake.configUpdates = true
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5,
		Labels: map[string]string{"tier": "web"}}
	configCalls := func() int {
		n := 0
		for _, c := range fake.calls {
			if c == "UpdateNodegroupConfig" {
				n++
			}
		}
		return n
	}
	fail := func(id string) drivers.GroupStatus {
		t.Helper()
		delete(fake.groups["ng"].Labels, "tier")
		fake.updates[id].Status = ekstypes.UpdateStatusFailed
		fake.updates[id].Errors = []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeAccessDenied,
			ErrorMessage: aws.String("The node role is not allowed to describe the cluster")}}
		group.UpdateID = id
		status, err := d.EnsureGroup(ctx, group)
		require.NoError(t, err)
		assert.Equal(t, "Failed", status.UpdateStatus)
		assert.Contains(t, status.Message, "update "+id+" failed: AccessDenied")
		group.UpdateID = "" // the status says Failed: the controller passes it no more
		return status
	}
	look := func(driver *Driver) drivers.GroupStatus {
		t.Helper()
		status, err := driver.EnsureGroup(ctx, group)
		require.NoError(t, err)
		return status
	}

	status := look(d)
	require.Equal(t, "update-1", status.UpdateID)
	status = fail("update-1")
	assert.Contains(t, status.Message, "failed 1 time(s) in a row; it is asked again after 1m0s")

	t.Log("within the backoff, no look asks again, also after a restart; the errors stay")
	fake.calls = nil
	restarted := New(Options{Cluster: "e2e", Clients: d.opts.Clients, Now: d.opts.Now})
	for _, driver := range []*Driver{d, d, restarted} {
		status = look(driver)
		assert.Equal(t, "update-1", status.UpdateID)
		assert.Equal(t, "Failed", status.UpdateStatus)
		assert.Contains(t, status.Message, "update update-1 failed: AccessDenied: The node role is not allowed to describe the cluster")
		assert.Contains(t, status.Message, "asked again after 1m0s (at 2026-11-29T12:01:00Z)")
		now = now.Add(20 * time.Second)
	}
	assert.Zero(t, configCalls(), "the failed change is not asked again within its backoff")

	t.Log("after it, asked again; failed again, the backoff doubles")
	status = look(d)
	assert.Equal(t, 1, configCalls())
	require.Equal(t, "update-2", status.UpdateID)
	status = fail("update-2")
	assert.Contains(t, status.Message, "failed 2 time(s) in a row; it is asked again after 2m0s")
	now = now.Add(time.Minute)
	look(d)
	assert.Equal(t, 1, configCalls(), "still within the doubled backoff")
	now = now.Add(time.Minute)
	status = look(d)
	assert.Equal(t, 2, configCalls())
	require.Equal(t, "update-3", status.UpdateID)
	status = fail("update-3")
	assert.Contains(t, status.Message, "failed 3 time(s) in a row; it is asked again after 4m0s")

	t.Log("a change of the spec is asked at once")
	group.Labels = map[string]string{"tier": "api"}
	status = look(d)
	assert.Equal(t, 3, configCalls())
	require.Equal(t, "update-4", status.UpdateID)
	assert.Equal(t, "InProgress", status.UpdateStatus)

	t.Log("in step at last: the record goes")
	fake.updates["update-4"].Status = ekstypes.UpdateStatusSuccessful
	group.UpdateID = "update-4"
	look(d)
	group.UpdateID = ""
	status = look(d)
	assert.NotContains(t, fake.groups["ng"].Tags, failedConfigTag)
	assert.NotContains(t, status.Message, "failed")
}

// TestTheConfigurationBackoffIsBounded: it doubles up to configRetryMax.
func TestTheConfigurationBackoffIsBounded(t *testing.T) {
	assert.Equal(t, time.Minute, configBackoff(1))
	assert.Equal(t, 8*time.Minute, configBackoff(4))
	assert.Equal(t, configRetryMax, configBackoff(6))
	assert.Equal(t, configRetryMax, configBackoff(1000))
}
