package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestANodeGroupWhoseCreationFailedIsMadeAgainOnceTheTemplateChanges: EKS
// can neither update a CREATE_FAILED node group nor bring it back to
// ACTIVE; it must be deleted. Made with the NodeSet's current template it
// is left with its health issues (made again, it would fail the same
// way), and nothing is asked of EKS; once the class or the set changes,
// an edit that may fix the cause, it is deleted, and the next sync makes
// it again with the new template.
func TestANodeGroupWhoseCreationFailedIsMadeAgainOnceTheTemplateChanges(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	ng := fake.groups["ng"]
	ng.Status = ekstypes.NodegroupStatusCreateFailed
	ng.Tags[awscloud.TagTemplateHash] = "h1"
	ng.Health = &ekstypes.NodegroupHealth{Issues: []ekstypes.Issue{{Code: ekstypes.NodegroupIssueCodeNodeCreationFailure,
		Message: aws.String("Instances failed to join the kubernetes cluster")}}}

	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 4, MaxReplicas: 5, TemplateHash: "h1", ManagedRollout: true}
	fake.calls = nil
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "CREATE_FAILED", status.State)
	assert.Contains(t, status.Message, "NodeCreationFailure: Instances failed to join the kubernetes cluster")
	assert.Contains(t, status.Message, "EKS cannot change a node group whose creation failed")
	assert.Equal(t, []string{"DescribeNodegroup"}, fake.calls, "nothing is asked of EKS for the template it failed with")

	group.TemplateHash = "h2"
	fake.calls = nil
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, fake.calls, "DeleteNodegroup ng")
	assert.NotContains(t, fake.calls, "UpdateNodegroupConfig")
	assert.Contains(t, status.Message, "deleted, to be made again")
	assert.Equal(t, ekstypes.NodegroupStatusDeleting, fake.groups["ng"].Status)
}

// TestAFailedDeletionIsSaid: a node group whose deletion failed
// (DELETE_FAILED: a security group still in use) is asked to be deleted
// again, as EKS allows, but DeleteGroup says why it failed, and does not
// answer "in progress" (which the node controller looks at again in two
// seconds without a word), so that its NodeSet's Event names the cause and
// the retries back off.
func TestAFailedDeletionIsSaid(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	ng := fake.groups["ng"]
	ng.Status = ekstypes.NodegroupStatusDeleteFailed
	ng.Health = &ekstypes.NodegroupHealth{Issues: []ekstypes.Issue{{Code: ekstypes.NodegroupIssueCodeEc2SecurityGroupDeletionFailure,
		Message: aws.String("DependencyViolation - resource has a dependent object"), ResourceIds: []string{"sg-0123abcd"}}}}
	fake.calls = nil
	err := d.DeleteGroup(ctx, w.class(), "ng")
	require.Error(t, err)
	assert.NotErrorIs(t, err, drivers.ErrInProgress)
	assert.ErrorContains(t, err, "Ec2SecurityGroupDeletionFailure: DependencyViolation - resource has a dependent object (sg-0123abcd)")
	assert.Contains(t, fake.calls, "DeleteNodegroup ng", "deleted again")

	// The deletion asked again runs: in progress, as any.
	assert.ErrorIs(t, d.DeleteGroup(ctx, w.class(), "ng"), drivers.ErrInProgress)
}
