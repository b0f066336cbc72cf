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
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestAnUpdateEKSRefusesForAnotherIsWaitedFor: EKS runs one update of a
// node group at a time, and refuses another with ResourceInUseException,
// also while DescribeNodegroup still says ACTIVE (an update just started,
// by nodeset's previous call or by someone else). That is a wait, as for
// UPDATING, not a failure of the group: no error (which would be a
// GroupFailed Event and ReplicaFailure), and the change is made once EKS
// takes it.
func TestAnUpdateEKSRefusesForAnotherIsWaitedFor(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	fake.groups["ng"].Version = aws.String("1.37")
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 3, MaxReplicas: 5, ManagedRollout: true,
		Labels: map[string]string{"tier": "web"}}
	fake.busy = true
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err, "a configuration change EKS refuses while another update runs")
	assert.Equal(t, "ACTIVE", status.State)
	assert.Empty(t, status.Message)
	assert.Len(t, status.Machines, 2, "the instances are still reported")

	class := w.class()
	section := *class.Spec.EKSManagedNodeGroup
	section.Version = "1.38"
	class.Spec.EKSManagedNodeGroup = &section
	fake.groups["ng"].Labels = map[string]string{"pool": "general", "tier": "web"}
	fake.groups["ng"].ScalingConfig.DesiredSize = aws.Int32(3)
	_, err = d.EnsureGroup(ctx, drivers.Group{Name: "ng", Owner: ngOwner, Class: class, Replicas: 3, MaxReplicas: 5, ManagedRollout: true,
		Labels: map[string]string{"tier": "web"}})
	require.NoError(t, err, "a version change EKS refuses while another update runs")
	assert.Contains(t, fake.calls, "UpdateNodegroupVersion 1.38")

	fake.busy = false
	status, err = d.EnsureGroup(ctx, drivers.Group{Name: "ng", Owner: ngOwner, Class: class, Replicas: 3, MaxReplicas: 5, ManagedRollout: true,
		Labels: map[string]string{"tier": "web"}})
	require.NoError(t, err)
	assert.Equal(t, "InProgress", status.UpdateStatus, "started once EKS takes it")
}

// TestAFailedUpdateStaysFailedUntilSomethingChanges: an update EKS gave up
// on (PodEvictionFailure: a PodDisruptionBudget blocked the drain for 15
// minutes; NodeCreationFailure) is not started again by itself. Once the
// node controller has seen it finish it no longer passes its id (the
// NodeSet's status says Failed), and a restarted one never knew it; the
// node group's tag nodeset.dev/failed-update keeps it. Its errors stay in
// the status, so ReplicaFailure stays True, instead of a new update each
// poll that fails the same way, each surging and draining the group again.
// Other changes (labels, scaling) still go through; another version is a
// new update; removing the tag tries the same one again.
func TestAFailedUpdateStaysFailedUntilSomethingChanges(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5, TemplateHash: "h2", ManagedRollout: true}
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Equal(t, "update-1", status.UpdateID)
	assert.NotEqual(t, "h2", status.TemplateHash, "the group is not at the new template while its update runs")

	// EKS gives up: the node group is ACTIVE again, at its old version.
	fake.groups["ng"].Status, fake.groups["ng"].ModifiedAt = ekstypes.NodegroupStatusActive, aws.Time(time.Now().Add(time.Hour))
	fake.updates["update-1"].Status = ekstypes.UpdateStatusFailed
	fake.updates["update-1"].Errors = []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodePodEvictionFailure,
		ErrorMessage: aws.String("Reached max retries while trying to evict pods from nodes in node group ng")}}
	group.UpdateID = "update-1" // what the NodeSet's status said: InProgress
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "Failed", status.UpdateStatus)
	assert.Contains(t, status.Message, "update update-1 failed: PodEvictionFailure")

	for _, driver := range []*Driver{d, New(Options{Cluster: "e2e", Clients: d.opts.Clients})} {
		group.UpdateID = "" // the status says Failed: the controller tracks it no more
		fake.calls = nil
		status, err = driver.EnsureGroup(ctx, group)
		require.NoError(t, err)
		assert.NotContains(t, fake.calls, "UpdateNodegroupVersion 1.37", "the failed update is not started again by itself")
		assert.Equal(t, "update-1", status.UpdateID)
		assert.Equal(t, "Failed", status.UpdateStatus)
		assert.Contains(t, status.Message, "update update-1 failed: PodEvictionFailure", "its errors stay in the status")
	}

	t.Log("other changes still go through")
	group.Labels = map[string]string{"tier": "web"}
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "web", fake.groups["ng"].Labels["tier"])

	t.Log("removing the tag tries the same update again: a new request, not the failed one's answer again")
	delete(fake.groups["ng"].Tags, failedUpdateTag)
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, fake.calls, "UpdateNodegroupVersion 1.37")
	assert.Equal(t, "update-2", status.UpdateID)
	assert.Equal(t, "InProgress", status.UpdateStatus)
	assert.Empty(t, status.Message)

	t.Log("another version is another update")
	fake.groups["ng"].Status, fake.groups["ng"].ModifiedAt = ekstypes.NodegroupStatusActive, aws.Time(time.Now().Add(2*time.Hour))
	fake.updates["update-2"].Status = ekstypes.UpdateStatusFailed
	group.UpdateID = "update-2"
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	class := w.class()
	section := *class.Spec.EKSManagedNodeGroup
	section.Version = "1.38"
	class.Spec.EKSManagedNodeGroup = &section
	group.Class, group.UpdateID, group.TemplateHash = class, "", "h3"
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, fake.calls, "UpdateNodegroupVersion 1.38")
	assert.Equal(t, "update-3", status.UpdateID)

	t.Log("in step at last: the record goes")
	fake.updates["update-3"].Status = ekstypes.UpdateStatusSuccessful
	fake.groups["ng"].Status, fake.groups["ng"].Version = ekstypes.NodegroupStatusActive, aws.String("1.38")
	group.UpdateID = "update-3"
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.NotContains(t, fake.groups["ng"].Tags, failedUpdateTag)
	assert.Equal(t, "h3", status.TemplateHash, "the group says it is at the set's template")
}

// TestAFailedUpdateSeenWithAConfigChangeIsKept: the class (or the
// NodeSet's labels) changed while EKS ran the update, so a configuration
// change waits for its end. When the update is seen failed, the change is
// applied at once, and the failure is recorded all the same: the next
// look, which no longer has the update's id from the NodeSet's status,
// does not start it again.
func TestAFailedUpdateSeenWithAConfigChangeIsKept(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5, TemplateHash: "h2", ManagedRollout: true}
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Equal(t, "update-1", status.UpdateID)
	assert.NotEqual(t, "h2", status.TemplateHash, "the group is not at the new template while its update runs")

	group.Labels = map[string]string{"tier": "web"} // changed meanwhile
	fake.groups["ng"].Status, fake.groups["ng"].ModifiedAt = ekstypes.NodegroupStatusActive, aws.Time(time.Now().Add(time.Hour))
	fake.updates["update-1"].Status = ekstypes.UpdateStatusFailed
	fake.updates["update-1"].Errors = []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeNodeCreationFailure, ErrorMessage: aws.String("Instances failed to join")}}
	group.UpdateID = "update-1"
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "web", fake.groups["ng"].Labels["tier"], "the waiting change is applied")
	assert.Equal(t, "Failed", status.UpdateStatus, "and the failure reported with it")
	assert.Contains(t, status.Message, "update update-1 failed: NodeCreationFailure")

	group.UpdateID = ""
	fake.calls = nil
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.NotContains(t, fake.calls, "UpdateNodegroupVersion 1.37", "the failed update is not started again")
	assert.Contains(t, status.Message, "update update-1 failed: NodeCreationFailure: Instances failed to join")
}

// TestAFailedConfigurationUpdateIsSaid: EKS answers UpdateNodegroupConfig
// with an update it runs (DescribeUpdate reports it), which can fail, with
// errors, as a version update can. It is tracked: while it runs nothing
// else is asked; once failed, its errors are said (the node controller makes
// them the NodeSet's status.group.message and a Warning Event), where
// before the failure was never seen and the change was asked for again on
// every look.
func TestAFailedConfigurationUpdateIsSaid(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	fake.configUpdates = true
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5,
		Labels: map[string]string{"tier": "web"}}
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Equal(t, "update-1", status.UpdateID, "the configuration update is tracked")
	assert.Equal(t, "InProgress", status.UpdateStatus)

	t.Log("while it runs, nothing else is asked")
	group.UpdateID = status.UpdateID
	fake.calls = nil
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, fake.calls, "DescribeUpdate update-1")
	assert.NotContains(t, fake.calls, "UpdateNodegroupConfig")
	assert.Equal(t, "InProgress", status.UpdateStatus)

	t.Log("EKS gives up on it: its errors are said, and it is not asked for again in the same look")
	delete(fake.groups["ng"].Labels, "tier")
	fake.updates["update-1"].Status = ekstypes.UpdateStatusFailed
	fake.updates["update-1"].Errors = []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeAccessDenied,
		ErrorMessage: aws.String("The node role is not allowed to describe the cluster")}}
	fake.calls = nil
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "update-1", status.UpdateID)
	assert.Equal(t, "Failed", status.UpdateStatus)
	assert.Contains(t, status.Message, "update update-1 failed: AccessDenied: The node role is not allowed to describe the cluster")
	assert.NotContains(t, fake.calls, "UpdateNodegroupConfig")

	t.Log("the next look, which the status no longer tells of it, still says it, and asks again only after a backoff (TestAFailedConfigurationUpdateBacksOff)")
	group.UpdateID = ""
	fake.calls = nil
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "update-1", status.UpdateID)
	assert.Contains(t, status.Message, "update update-1 failed: AccessDenied")
	assert.NotContains(t, fake.calls, "UpdateNodegroupConfig")
}

// TestAVersionEKSRefusesIsARefusedConfiguration: EKS refuses an update to
// a version above the cluster's outright. The driver says so as
// ErrInvalidConfiguration (which the node controller records as
// status.group.refused, and a Managed rollout then fails), and the group
// stays at the template it had.
func TestAVersionEKSRefusesIsARefusedConfiguration(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	fake.refuses = "1.37"
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5, TemplateHash: "h2", ManagedRollout: true}
	_, err := d.EnsureGroup(ctx, group)
	require.Error(t, err)
	assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.Contains(t, err.Error(), "Requested Nodegroup version 1.37 is invalid")
	assert.Contains(t, fake.calls, "UpdateNodegroupVersion 1.37")
	assert.NotEqual(t, "h2", fake.groups["ng"].Tags[awscloud.TagTemplateHash], "the group is not at the refused template")
}
