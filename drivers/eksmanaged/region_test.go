package eksmanaged

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

// A class whose region was changed under a running node group still has
// Nodes on the old region's instances; when they go, their instances must
// go too, looked for in their own region.
func TestTerminateMachineFollowsTheInstancesRegion(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := New(Options{Cluster: "e2e", Clients: SDKClients(awscloud.SDKConfig{Endpoint: w.endpoint})})
	ec2c := w.api.EC2.(*ec2.Client)
	image := framework.NewMotoNetwork(t, ec2c, region).Image
	run, err := ec2c.RunInstances(ctx, &ec2.RunInstancesInput{ImageId: aws.String(image), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		InstanceType: ec2types.InstanceTypeT3Large, SubnetId: aws.String(w.subnet)})
	require.NoError(t, err)
	inst := run.Instances[0]
	providerID := awscloud.ProviderID(aws.ToString(inst.Placement.AvailabilityZone), aws.ToString(inst.InstanceId))

	moved := w.class()
	moved.Spec.EKSManagedNodeGroup.Region = "us-west-2"
	require.NoError(t, d.TerminateMachine(ctx, moved, d.GroupName(drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web"}), providerID))

	out, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{aws.ToString(inst.InstanceId)}})
	require.NoError(t, err)
	require.Len(t, out.Reservations, 1)
	assert.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated},
		out.Reservations[0].Instances[0].State.Name, "the instance of %s, in %s, outlived its Node", providerID, region)
}

func (f *fakeEKS) UntagResource(_ context.Context, in *eks.UntagResourceInput, _ ...func(*eks.Options)) (*eks.UntagResourceOutput, error) {
	f.call("UntagResource")
	for _, ng := range f.groups {
		if aws.ToString(ng.NodegroupArn) == aws.ToString(in.ResourceArn) {
			for _, k := range in.TagKeys {
				delete(ng.Tags, k)
			}
			return &eks.UntagResourceOutput{}, nil
		}
	}
	return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException"}
}

func (f *fakeEKS) DeleteNodegroup(_ context.Context, in *eks.DeleteNodegroupInput, _ ...func(*eks.Options)) (*eks.DeleteNodegroupOutput, error) {
	f.call("DeleteNodegroup " + aws.ToString(in.NodegroupName))
	ng, ok := f.groups[aws.ToString(in.NodegroupName)]
	if !ok {
		return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException"}
	}
	ng.Status = ekstypes.NodegroupStatusDeleting
	return &eks.DeleteNodegroupOutput{}, nil
}

// movedManagedWorld is managedWorld's node group "ng" in us-east-1, with
// two instances, and the class moved to us-west-2, where a node group of
// the same name runs (each region its own fake EKS; Auto Scaling and EC2
// are moto's).
func movedManagedWorld(t *testing.T) (w *world, east, west *fakeEKS, d *Driver, moved drivers.Class, old []string) {
	t.Helper()
	ctx := context.Background()
	w, east, _ = managedWorld(t)
	owner := ngOwner
	owner.UID = "uid-1"
	east.groups["ng"].Tags[awscloud.TagNodeSetUID] = "uid-1"
	westNG := *east.groups["ng"]
	westNG.NodegroupArn = aws.String("arn:aws:eks:us-west-2:123456789012:nodegroup/prod/ng/2")
	westNG.Resources = &ekstypes.NodegroupResources{AutoScalingGroups: []ekstypes.AutoScalingGroup{{Name: aws.String("ng-asg-west")}}}
	westNG.Tags = maps.Clone(east.groups["ng"].Tags)
	westNG.ScalingConfig = &ekstypes.NodegroupScalingConfig{MinSize: aws.Int32(0), MaxSize: aws.Int32(5), DesiredSize: aws.Int32(2)}
	west = &fakeEKS{updates: map[string]*ekstypes.Update{}, groups: map[string]*ekstypes.Nodegroup{"ng": &westNG}}
	clients := SDKClients(awscloud.SDKConfig{Endpoint: w.endpoint})
	d = New(Options{Cluster: "e2e", Clients: func(ctx context.Context, r string, creds map[string][]byte) (API, error) {
		api, err := clients(ctx, r, creds)
		if r == "us-west-2" {
			api.EKS = west
		} else {
			api.EKS = east
		}
		return api, err
	}})
	status, err := d.DescribeGroup(ctx, w.class(), "ng")
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	for _, m := range status.Machines {
		old = append(old, m.ProviderID)
	}
	moved = w.class()
	moved.Spec = *moved.Spec.DeepCopy()
	moved.Spec.EKSManagedNodeGroup.Region = "us-west-2"
	return w, east, west, d, moved, old
}

// TestTheOldRegionsNodeGroupGoesOnceEmpty: a class whose region changed
// under a running NodeSet leaves its node group in the old region; once
// the last of its instances is terminated (each with its drained Node),
// that node group is deleted, and not before. The new region's node group
// is left as it is.
func TestTheOldRegionsNodeGroupGoesOnceEmpty(t *testing.T) {
	ctx := context.Background()
	_, east, west, d, moved, old := movedManagedWorld(t)
	owner := ngOwner
	owner.UID = "uid-1"
	group := drivers.Group{Name: "ng", Owner: owner, Class: moved, Replicas: 2, MaxReplicas: 5}

	require.NoError(t, d.TerminateMachine(ctx, moved, "ng", old[0]))
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.NotContains(t, east.calls, "DeleteNodegroup ng", "the old region's node group still has an instance, whose Node is still there")

	require.NoError(t, d.TerminateMachine(ctx, moved, "ng", old[1]))
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, east.calls, "DeleteNodegroup ng", "the emptied node group of the old region is deleted")
	assert.Equal(t, "us-east-1", west.groups["ng"].Tags[awscloud.TagFormerRegions], "remembered until EKS has deleted it")

	delete(east.groups, "ng") // EKS is done
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.NotContains(t, west.groups["ng"].Tags, awscloud.TagFormerRegions, "nothing is left to remember")
	assert.NotContains(t, west.calls, "DeleteNodegroup ng", "the new region's node group is untouched")
	assert.EqualValues(t, 2, aws.ToInt32(west.groups["ng"].ScalingConfig.DesiredSize))
}

// TestAnOldRegionsNodeGroupOfAnotherOwnerIsLeftAlone: the node group under
// the NodeSet's name in the old region is deleted only when its tags name
// this NodeSet, even with the NodeSet's deletion.
func TestAnOldRegionsNodeGroupOfAnotherOwnerIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	_, east, west, d, moved, old := movedManagedWorld(t)
	for _, providerID := range old {
		require.NoError(t, d.TerminateMachine(ctx, moved, "ng", providerID))
	}
	east.groups["ng"].Tags[awscloud.TagNodeSetUID] = "uid-0"
	owner := ngOwner
	owner.UID = "uid-1"
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: "ng", Owner: owner, Class: moved, Replicas: 2, MaxReplicas: 5})
	require.NoError(t, err)
	west.groups["ng"].ScalingConfig.DesiredSize = aws.Int32(0)
	for err = d.DeleteGroup(ctx, moved, "ng"); errors.Is(err, drivers.ErrInProgress); err = d.DeleteGroup(ctx, moved, "ng") {
		delete(west.groups, "ng") // EKS is done
	}
	require.NoError(t, err)
	assert.NotContains(t, east.calls, "DeleteNodegroup ng", "another NodeSet's node group under this name")
	assert.Contains(t, west.calls, "DeleteNodegroup ng")
}
