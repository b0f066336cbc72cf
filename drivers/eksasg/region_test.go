package eksasg

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

// A class whose region was changed under a running group still has Nodes
// on the old region's instances; when they go, their instances must go
// too, in their own region, and the old group must not launch a
// replacement.
func TestTerminateMachineFollowsTheInstancesRegion(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "moved", UID: "uid-1"}
	name := GroupName("prod", "team-a", "moved")
	status, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 2, MaxReplicas: 2, TemplateHash: "h1"})
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	victim := status.Machines[0].ProviderID

	moved := class
	moved.Spec = *class.Spec.DeepCopy()
	moved.Spec.EKSAutoscalingGroup.Region = "us-west-2"
	terminateOrRetry(t, d, moved, name, victim)

	assert.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated}, w.state(t, victim),
		"the instance of %s, in %s, outlived its Node", victim, region)
	g, err := awscloud.FindGroup(ctx, w.asg, name)
	require.NoError(t, err)
	assert.EqualValues(t, 1, aws.ToInt32(g.DesiredCapacity), "the old region's group was lowered with the termination, so it launches no replacement")
}

// movedWorld is a group of two instances made in the world's region, and
// the class moved to us-west-2 (with a subnet and image there).
func movedWorld(t *testing.T, w *world, d *Driver, owner drivers.Owner) (name string, moved drivers.Class, old []string, westASG awscloud.AutoScaling, westEC2 *ec2.Client) {
	t.Helper()
	ctx := context.Background()
	class := w.class()
	name = GroupName(owner.Cluster, owner.Namespace, owner.Name)
	status, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 2, MaxReplicas: 2, TemplateHash: "h1"})
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	for _, m := range status.Machines {
		old = append(old, m.ProviderID)
	}
	asg, ec2c, err := awscloud.SDKClients(w.endpoint)(ctx, "us-west-2", testCredentials)
	require.NoError(t, err)
	westASG, westEC2 = asg, ec2c.(*ec2.Client)
	west := framework.NewMotoNetwork(t, westEC2, "us-west-2")
	moved = class
	moved.Spec = *class.Spec.DeepCopy()
	s := moved.Spec.EKSAutoscalingGroup
	s.Region, s.SubnetIDs, s.ImageID = "us-west-2", []string{west.Subnet}, west.Image
	status, err = d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: moved, Replicas: 2, MaxReplicas: 2, TemplateHash: "h2"})
	require.NoError(t, err)
	require.Len(t, status.Machines, 2, "the new region's group")
	return name, moved, old, westASG, westEC2
}

func launchTemplateExists(t *testing.T, ec2c awscloud.EC2, name string) bool {
	t.Helper()
	_, err := ec2c.DescribeLaunchTemplateVersions(context.Background(), &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateName: aws.String(name), Versions: []string{"$Latest"}})
	if launchTemplateNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestTheOldRegionsGroupGoesOnceEmpty: a class whose region changed under a
// running NodeSet leaves its group in the old region; once the last of its
// instances is terminated (each with its drained Node), the group and its
// launch template go too, and not before. The new region's group is left
// as it is.
func TestTheOldRegionsGroupGoesOnceEmpty(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "moved", UID: "uid-1"}
	name, moved, old, westASG, _ := movedWorld(t, w, d, owner)
	group := drivers.Group{Name: name, Owner: owner, Class: moved, Replicas: 2, MaxReplicas: 2, TemplateHash: "h2"}

	terminateOrRetry(t, d, moved, name, old[0])
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	g, err := awscloud.FindGroup(ctx, w.asg, name)
	require.NoError(t, err, "the old region's group still holds an instance, whose Node is still there")
	assert.Len(t, g.Instances, 1)

	terminateOrRetry(t, d, moved, name, old[1])
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	_, err = awscloud.FindGroup(ctx, w.asg, name)
	assert.ErrorIs(t, err, drivers.ErrNotFound, "the emptied group of the old region is deleted")
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.False(t, launchTemplateExists(t, w.ec2, name), "and so is its launch template")

	now, err := awscloud.FindGroup(ctx, westASG, name)
	require.NoError(t, err)
	assert.EqualValues(t, 2, aws.ToInt32(now.DesiredCapacity), "the new region's group is untouched")
	for _, tag := range now.Tags {
		assert.NotEqual(t, awscloud.TagFormerRegions, aws.ToString(tag.Key), "nothing is left to remember")
	}
}

// TestDeletingAMovedNodeSetDeletesBothGroups: the NodeSet's deletion
// removes the groups and launch templates of its old region and its
// current one.
func TestDeletingAMovedNodeSetDeletesBothGroups(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "moved", UID: "uid-1"}
	name, moved, old, westASG, westEC2 := movedWorld(t, w, d, owner)
	for _, providerID := range old {
		terminateOrRetry(t, d, moved, name, providerID)
	}
	west, err := d.DescribeGroup(ctx, moved, name)
	require.NoError(t, err)
	for _, m := range west.Machines {
		terminateOrRetry(t, d, moved, name, m.ProviderID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for err = d.DeleteGroup(ctx, moved, name); errors.Is(err, drivers.ErrInProgress) && time.Now().Before(deadline); err = d.DeleteGroup(ctx, moved, name) {
	}
	require.NoError(t, err)
	_, err = awscloud.FindGroup(ctx, westASG, name)
	assert.ErrorIs(t, err, drivers.ErrNotFound)
	assert.False(t, launchTemplateExists(t, westEC2, name))
	_, err = awscloud.FindGroup(ctx, w.asg, name)
	assert.ErrorIs(t, err, drivers.ErrNotFound, "the old region's group goes with the NodeSet")
	assert.False(t, launchTemplateExists(t, w.ec2, name))
}

// TestAnOldRegionsGroupOfAnotherOwnerIsLeftAlone: the group under the
// NodeSet's name in the old region is deleted only when its tags name this
// NodeSet (cluster, namespace, name and UID).
func TestAnOldRegionsGroupOfAnotherOwnerIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "moved", UID: "uid-1"}
	name, moved, old, _, _ := movedWorld(t, w, d, owner)
	for _, providerID := range old {
		terminateOrRetry(t, d, moved, name, providerID)
	}
	_, err := w.asg.(*autoscaling.Client).CreateOrUpdateTags(ctx, &autoscaling.CreateOrUpdateTagsInput{Tags: []asgtypes.Tag{{
		ResourceId: aws.String(name), ResourceType: aws.String("auto-scaling-group"), Key: aws.String(awscloud.TagNodeSetUID),
		Value: aws.String("uid-0"), PropagateAtLaunch: aws.Bool(false)}}})
	require.NoError(t, err)
	_, err = d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: moved, Replicas: 2, MaxReplicas: 2, TemplateHash: "h2"})
	require.NoError(t, err)
	_, err = awscloud.FindGroup(ctx, w.asg, name)
	assert.NoError(t, err, "the old region's group under this name is another NodeSet's")
	assert.True(t, launchTemplateExists(t, w.ec2, name))
}

// terminateOrRetry terminates a machine as the node controller would:
// moto, loaded, at times answers TerminateInstanceInAutoScalingGroup with
// an internal error (500) five times over, past the SDK's retries, where
// the node controller's next sync would try again. Only that is retried,
// twice; any other error fails the test.
func terminateOrRetry(t *testing.T, d *Driver, class drivers.Class, name, providerID string) {
	t.Helper()
	var err error
	for range 3 {
		if err = d.TerminateMachine(context.Background(), class, name, providerID); err == nil || !strings.Contains(err.Error(), "StatusCode: 500") {
			break
		}
	}
	require.NoError(t, err)
}
