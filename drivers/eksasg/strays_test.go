package eksasg

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// state is the EC2 state of the instance of providerID.
func (w *world) state(t *testing.T, providerID string) ec2types.InstanceStateName {
	t.Helper()
	id, err := awscloud.InstanceID(providerID)
	require.NoError(t, err)
	out, err := w.ec2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	require.Len(t, out.Reservations, 1)
	return out.Reservations[0].Instances[0].State.Name
}

func (w *world) detach(t *testing.T, group, providerID string) {
	t.Helper()
	id, err := awscloud.InstanceID(providerID)
	require.NoError(t, err)
	_, err = w.asg.(*autoscaling.Client).DetachInstances(context.Background(), &autoscaling.DetachInstancesInput{
		AutoScalingGroupName: aws.String(group), InstanceIds: []string{id}, ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
}

// TestInstanceOutOfItsGroupIsNotTakenAsTerminated: an instance that left
// its group (detached by someone, or left by a termination that failed half
// way) still runs; TerminateMachine asks EC2 and terminates it there, and
// until then the stray list names it with its owner.
func TestInstanceOutOfItsGroupIsNotTakenAsTerminated(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	name := GroupName("prod", "team-a", "web")
	status, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 2, MaxReplicas: 2, TemplateHash: "h1"})
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	detached, kept := status.Machines[0], status.Machines[1]
	w.detach(t, name, detached.ProviderID)

	scopes := d.GroupScopes(ctx)
	require.Len(t, scopes, 1)
	strays, err := d.ListStrayMachines(ctx, scopes[0])
	require.NoError(t, err)
	require.Len(t, strays, 1, "the detached instance, and not the one in the group")
	assert.Equal(t, detached.ProviderID, strays[0].ProviderID)
	assert.Equal(t, detached.Name, strays[0].Name)
	assert.Equal(t, owner, strays[0].Owner, "its owner, from the tags it was launched with")
	assert.NotZero(t, strays[0].CreatedAt)

	require.NoError(t, d.TerminateMachine(ctx, class, name, detached.ProviderID))
	assert.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated},
		w.state(t, detached.ProviderID), "not in the group is not terminated: EC2 terminates it")
	assert.Equal(t, ec2types.InstanceStateNameRunning, w.state(t, kept.ProviderID))
	require.NoError(t, d.TerminateMachine(ctx, class, name, detached.ProviderID), "terminating it again is done")
	strays, err = d.ListStrayMachines(ctx, scopes[0])
	require.NoError(t, err)
	assert.Empty(t, strays)

	t.Log("the group deleted under an instance detached before: collected as a stray")
	w.detach(t, name, kept.ProviderID)
	require.NoError(t, deleteUntilGone(ctx, d, class, name))
	strays, err = d.ListStrayMachines(ctx, scopes[0])
	require.NoError(t, err)
	require.Len(t, strays, 1)
	require.NoError(t, d.TerminateStrayMachine(ctx, scopes[0], strays[0].ProviderID))
	assert.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated},
		w.state(t, kept.ProviderID))
}

// deleteUntilGone calls DeleteGroup until it is done.
func deleteUntilGone(ctx context.Context, d *Driver, class drivers.Class, name string) error {
	for range 50 {
		if err := d.DeleteGroup(ctx, class, name); err == nil || !errorsIsInProgress(err) {
			return err
		}
	}
	return d.DeleteGroup(ctx, class, name)
}

// TestEveryBrokenClassGetsAVerdictNamingTheField: what the cloud refuses,
// and what would borrow the controller's own identity, is an invalid
// configuration naming the field, never an endless retry.
func TestEveryBrokenClassGetsAVerdictNamingTheField(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	configs := awscloud.NewAWSConfigs(awscloud.SDKConfig{Endpoint: w.endpoint, MaxAttempts: 2})
	d := New(Options{Cluster: "prod", Clients: awscloud.ClientsFrom(configs), Clusters: NewClusterLookup(configs)})
	withSecret := func(c *drivers.Class) {
		c.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws-credentials"}
	}
	good := w.class()
	withSecret(&good)
	require.NoError(t, d.ValidateCloud(ctx, good))
	for _, tt := range []struct {
		name   string
		mutate func(*drivers.Class)
		want   string
	}{
		{"unknown instance type", func(c *drivers.Class) { c.Spec.EKSAutoscalingGroup.InstanceType = "t9.huge" },
			`spec.eksAutoscalingGroup.instanceType t9.huge: invalid configuration: InvalidInstanceType`},
		{"unknown type in a mixed-instances list", func(c *drivers.Class) {
			c.Spec.EKSAutoscalingGroup.InstanceType = ""
			c.Spec.EKSAutoscalingGroup.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large", "m9.mega"}}
		}, `spec.eksAutoscalingGroup.mixedInstances.instanceTypes m5.large,m9.mega: invalid configuration: InvalidInstanceType`},
		{"a region that does not exist", func(c *drivers.Class) { c.Spec.EKSAutoscalingGroup.Region = "zz-nowhere-9" },
			`spec.eksAutoscalingGroup.region: "zz-nowhere-9" is not an AWS region`},
		{"a misnamed key", func(c *drivers.Class) {
			withSecret(c)
			c.Credentials = map[string][]byte{"AWS_ACCESS_KEY_ID": []byte("testing"), awscloud.CredentialSecretAccessKey: []byte("testing")}
		}, "spec.credentialsSecretRef: Secret nodeset-system/aws-credentials has no key aws_access_key_id (it has keys AWS_ACCESS_KEY_ID, aws_secret_access_key)"},
		{"a missing key", func(c *drivers.Class) {
			withSecret(c)
			c.Credentials = map[string][]byte{awscloud.CredentialAccessKeyID: []byte("testing")}
		}, "has no key aws_secret_access_key"},
		{"an empty Secret", func(c *drivers.Class) { withSecret(c); c.Credentials = nil }, "has no key aws_access_key_id (it has no keys)"},
		{"a cluster that does not exist, looked up", func(c *drivers.Class) {
			c.Spec.EKSAutoscalingGroup.ClusterName, c.Spec.EKSAutoscalingGroup.Bootstrap = "staging", nil
		}, "spec.eksAutoscalingGroup.clusterName: EKS cluster staging does not exist in us-east-1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			class := w.class()
			section := *class.Spec.EKSAutoscalingGroup
			class.Spec.EKSAutoscalingGroup = &section
			tt.mutate(&class)
			err := d.ValidateCloud(ctx, class)
			require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			assert.ErrorContains(t, err, tt.want)
			assert.NotContains(t, err.Error(), "testing", "no credential in the message")
			if tt.name == "a misnamed key" {
				_, err := d.EnsureGroup(ctx, drivers.Group{Name: "g", Class: class, Replicas: 1, MaxReplicas: 1, TemplateHash: "h"})
				require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "no call is made with the node controller's own identity")
			}
		})
	}
	_, err := d.Capacity(ctx, func() drivers.Class {
		c := w.class()
		section := *c.Spec.EKSAutoscalingGroup
		section.InstanceType = "t9.huge"
		c.Spec.EKSAutoscalingGroup = &section
		return c
	}())
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "the capacity of an unknown type is the class's error too")
}

func errorsIsInProgress(err error) bool { return errors.Is(err, drivers.ErrInProgress) }

// rootDevice is the root device of the world's image and the size of its
// snapshot.
type rootDevice struct {
	device string
	size   int32
}

func (w *world) ec2ImageRoot(ctx context.Context) (rootDevice, error) {
	out, err := w.ec2.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{w.image}})
	if err != nil {
		return rootDevice{}, err
	}
	image := out.Images[0]
	for _, m := range image.BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == aws.ToString(image.RootDeviceName) && m.Ebs != nil {
			return rootDevice{device: aws.ToString(m.DeviceName), size: aws.ToInt32(m.Ebs.VolumeSize)}, nil
		}
	}
	return rootDevice{}, errors.New("the image has no root EBS volume")
}
