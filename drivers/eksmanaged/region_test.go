package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
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
