package eksmanaged

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// TestMachinesCarryTheLabelsEKSGivesItsNodes: EKS's bootstrap gives the
// kubelet of a managed node eks.amazonaws.com/nodegroup, capacityType and
// nodegroup-image (the instance's AMI), and, for a node group launched
// from the user's launch template, sourceLaunchTemplateId and
// sourceLaunchTemplateVersion. The kubelet applies them only to a Node it
// creates, so the Node nodeset makes carries what the driver can know for
// sure: the version only while no update may be replacing instances of
// another version, and EKS's values over the node group's labels.
func TestMachinesCarryTheLabelsEKSGivesItsNodes(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	ng := fake.groups["ng"]
	ng.CapacityType = ekstypes.CapacityTypesSpot
	ng.Labels["eks.amazonaws.com/capacityType"] = "ON_DEMAND" // a lie EKS itself would refuse
	ng.LaunchTemplate = &ekstypes.LaunchTemplateSpecification{Id: aws.String("lt-0abc"), Name: aws.String("web"), Version: aws.String("3")}

	status, err := d.DescribeGroup(ctx, w.class(), "ng")
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	for _, m := range status.Machines {
		id, err := awscloud.InstanceID(m.ProviderID)
		require.NoError(t, err)
		out, err := w.api.EC2.(*ec2.Client).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
		require.NoError(t, err)
		assert.Equal(t, aws.ToString(out.Reservations[0].Instances[0].ImageId), m.Labels["eks.amazonaws.com/nodegroup-image"])
		assert.Equal(t, "SPOT", m.Labels["eks.amazonaws.com/capacityType"])
		assert.Equal(t, "ng", m.Labels["eks.amazonaws.com/nodegroup"])
		assert.Equal(t, "lt-0abc", m.Labels["eks.amazonaws.com/sourceLaunchTemplateId"])
		assert.Equal(t, "3", m.Labels["eks.amazonaws.com/sourceLaunchTemplateVersion"])
	}

	ng.Status = ekstypes.NodegroupStatusUpdating
	status, err = d.DescribeGroup(ctx, w.class(), "ng")
	require.NoError(t, err)
	for _, m := range status.Machines {
		assert.NotContains(t, m.Labels, "eks.amazonaws.com/sourceLaunchTemplateVersion", "an update runs: the instance may be of either version")
		assert.Equal(t, "lt-0abc", m.Labels["eks.amazonaws.com/sourceLaunchTemplateId"], "one launch template for the node group's life")
	}
}

// TestLabelsEKSRefusesStayOffTheNodeGroup: EKS refuses a node group label
// under kubernetes.io, k8s.io or eks.amazonaws.com ("Label cannot contain
// reserved prefixes"), subdomains included. The class's section may not
// have them (its verdict), and those of the Nodes' labels (a class's
// nodeTemplate node-role.kubernetes.io/worker) go on the Nodes nodeset
// makes, not to EKS.
func TestLabelsEKSRefusesStayOffTheNodeGroup(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	for _, key := range []string{"node-role.kubernetes.io/worker", "k8s.io/x", "eks.amazonaws.com/capacityType"} {
		class := w.class()
		section := *class.Spec.EKSManagedNodeGroup
		section.Labels = map[string]string{key: "x"}
		class.Spec.EKSManagedNodeGroup = &section
		err := d.Validate(ctx, class)
		assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, key)
		assert.ErrorContains(t, err, "spec.eksManagedNodeGroup.labels["+key+"]")
	}

	owner := drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web", UID: "uid-web"}
	name := d.GroupName(owner)
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: w.class(), Replicas: 1, MaxReplicas: 2, TemplateHash: "h1",
		Labels: map[string]string{"tier": "web", "node-role.kubernetes.io/worker": "", "eks.amazonaws.com/capacityType": "SPOT"}})
	require.NoError(t, err)
	labels := nodegroup(t, w.api.EKS, name).Labels
	assert.Equal(t, "web", labels["tier"])
	assert.NotContains(t, labels, "node-role.kubernetes.io/worker")
	assert.NotContains(t, labels, "eks.amazonaws.com/capacityType")
}
