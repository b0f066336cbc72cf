package dockermachine

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/test/framework"
)

// ec2AccessKey and ec2SecretKey are the credentials the amazonec2 class
// gives its plugin; moto takes any.
const (
	ec2AccessKey = "AKIAPLANTEDEC2KEY7Q1"
	ec2SecretKey = "planted/EC2+secret+Wm4kT9rZ"
)

// amazonEC2Class is a class of rancher/machine's amazonec2 driver aimed at
// cloud (moto behind a proxy), launching into its network with the join
// script as the instance's user data.
func amazonEC2Class(cloud framework.MotoEC2) drivers.Class {
	return drivers.Class{Name: "ec2", Spec: nodesetv1alpha1.NodeClassSpec{
		Driver:               nodesetv1alpha1.DriverDockerMachine,
		CredentialsSecretRef: &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws"},
		DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName:        "amazonec2",
			Options:           cloud.AmazonEC2Options(),
			CredentialOptions: map[string]string{"amazonec2-access-key": "access-key", "amazonec2-secret-key": "secret-key"},
			Provisioning: &nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData,
				UserDataOption: "amazonec2-userdata", KubernetesVersion: "v1.37.2"},
		}},
	}, Credentials: map[string][]byte{"access-key": []byte(ec2AccessKey), "secret-key": []byte(ec2SecretKey)}}
}

// TestAmazonEC2Driver runs rancher/machine's own amazonec2 driver (this
// test binary, as docker-machine-driver-amazonec2) against moto, with the
// join script as the instance's user data: the instance is launched with
// it, found again by a second Create, reported running, and terminated by
// Delete with its key pair (or only forgotten, when it was terminated
// outside nodeset). A RunInstances that EC2 refuses for want of capacity
// (answered by a proxy, as moto never refuses) leaves nothing behind and is
// the driver's ErrOutOfCapacity, so cluster-autoscaler backs the group off. And nothing the plugin prints reaches the log with a
// credential: amazonec2 logs the body of every request it sends, the user
// data and so the bootstrap token in RunInstances', base64-encoded.
func TestAmazonEC2Driver(t *testing.T) {
	ctx := context.Background()
	logs := klogBuffer(t)
	var refuse atomic.Bool
	cloud := framework.StartMotoEC2(t, func(w http.ResponseWriter, _ *http.Request, _ []byte, form url.Values) bool {
		if form.Get("Action") != "RunInstances" || !refuse.Load() {
			return false
		}
		framework.AnswerNoCapacity(w, "t3.medium", "us-east-1a")
		return true
	})
	ec2c, network := cloud.EC2, cloud.Network

	d, store, joiner := newDriver(t)
	class := amazonEC2Class(cloud)
	require.NoError(t, d.Validate(ctx, class))
	require.NoError(t, d.ValidateCloud(ctx, class))

	id, err := d.Create(ctx, drivers.Machine{Name: "ec2-1", Class: class})
	require.NoError(t, err)
	assert.Equal(t, "docker-machine://amazonec2/ec2-1", id)
	instances := liveInstances(t, ec2c)
	require.Len(t, instances, 1)
	instance := instances[0]
	assert.Equal(t, ec2types.InstanceStateNameRunning, instance.State.Name)
	assert.Equal(t, network.Subnet, aws.ToString(instance.SubnetId))
	assert.Equal(t, network.Image, aws.ToString(instance.ImageId))
	assert.Equal(t, ec2types.InstanceTypeT3Medium, instance.InstanceType)
	assert.Contains(t, instance.Tags, ec2types.Tag{Key: aws.String("Name"), Value: aws.String("ec2-1")})
	attr, err := ec2c.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: instance.InstanceId,
		Attribute: ec2types.InstanceAttributeNameUserData})
	require.NoError(t, err)
	userData, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
	require.NoError(t, err)
	token := joiner.tokens["ec2-1"]
	require.NotEmpty(t, token)
	assert.Contains(t, string(userData), "export BOOTSTRAP_TOKEN='"+token+"'", "the instance joins with the join script")
	assert.Contains(t, string(userData), "export NODE_NAME='ec2-1'")
	keyPairs, err := ec2c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
	require.NoError(t, err)
	require.Len(t, keyPairs.KeyPairs, 1)
	assert.Equal(t, aws.ToString(instance.KeyName), aws.ToString(keyPairs.KeyPairs[0].KeyName))

	again, err := d.Create(ctx, drivers.Machine{Name: "ec2-1", Class: class})
	require.NoError(t, err)
	assert.Equal(t, id, again)
	assert.Len(t, liveInstances(t, ec2c), 1, "the machine is found, not made twice")
	status, err := d.Get(ctx, class, "ec2-1")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)

	// No room: amazonec2 quotes EC2's error code, and removes its key pair.
	refuse.Store(true)
	_, err = d.Create(ctx, drivers.Machine{Name: "ec2-2", Class: class})
	require.Error(t, err)
	assert.ErrorIs(t, err, drivers.ErrOutOfCapacity)
	assert.Contains(t, err.Error(), "InsufficientInstanceCapacity: We currently do not have sufficient t3.medium capacity")
	assert.Len(t, liveInstances(t, ec2c), 1)
	assert.NotContains(t, store.records, "ec2-2", "the refused machine's record is gone")
	keyPairs, err = ec2c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
	require.NoError(t, err)
	assert.Len(t, keyPairs.KeyPairs, 1, "the refused machine's key pair is deleted")
	refuse.Store(false)
	_, err = d.Create(ctx, drivers.Machine{Name: "ec2-2", Class: class})
	require.NoError(t, err, "with room again")
	assert.Len(t, liveInstances(t, ec2c), 2)

	// An instance terminated outside nodeset (by hand, or reclaimed):
	// Delete still forgets the machine and deletes its key pair.
	second := ""
	for _, i := range liveInstances(t, ec2c) {
		if slices.ContainsFunc(i.Tags, func(tag ec2types.Tag) bool {
			return aws.ToString(tag.Key) == "Name" && aws.ToString(tag.Value) == "ec2-2"
		}) {
			second = aws.ToString(i.InstanceId)
		}
	}
	require.NotEmpty(t, second)
	_, err = ec2c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{second}})
	require.NoError(t, err)
	for _, name := range []string{"ec2-1", "ec2-2"} {
		require.NoError(t, d.Delete(ctx, class, name))
		assert.NoDirExists(t, d.machineDir(name))
	}
	assert.Empty(t, liveInstances(t, ec2c), "Delete terminates the instances")
	keyPairs, err = ec2c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
	require.NoError(t, err)
	assert.Empty(t, keyPairs.KeyPairs, "and deletes their key pairs")
	assert.Empty(t, store.records)
	assertNoPluginLeft(t)

	logged := logs.String()
	require.Contains(t, logged, "Action=RunInstances", "the plugin's debug output, with the requests' bodies, reaches the log at -v=5")
	assert.Contains(t, logged, "[redacted:bootstrap token]", "scrubbed from RunInstances' user data")
	_, secret, _ := strings.Cut(token, ".")
	planted := append([]string{ec2AccessKey, ec2SecretKey, secret}, base64Inside(secret)...)
	for _, value := range planted {
		assert.NotContains(t, logged, value)
	}
}

// liveInstances are moto's instances that are not terminated.
func liveInstances(t *testing.T, ec2c *ec2.Client) []ec2types.Instance {
	t.Helper()
	out, err := ec2c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
	require.NoError(t, err)
	var live []ec2types.Instance
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			if i.State != nil && i.State.Name != ec2types.InstanceStateNameTerminated {
				live = append(live, i)
			}
		}
	}
	return live
}

// TestAnAmazonEC2CreateStoppedMidwayLeavesNoInstance: amazonec2's Create
// imports a key pair, launches the instance and then waits for it to run.
// A node controller that stops in that wait (the attempt's time is up, or
// it is killed: its plugin goes either way) has recorded the machine with
// the configuration saved before Create, which names neither. The next
// attempt must terminate that instance and delete its key pair before it
// launches another, not leave them running unrecorded.
func TestAnAmazonEC2CreateStoppedMidwayLeavesNoInstance(t *testing.T) {
	ctx := context.Background()
	// The instance never runs, as far as the plugin can tell: its wait
	// hangs until the plugin is gone.
	cloud, hold := motoHolding(t, "DescribeInstances")
	ec2c := cloud.EC2
	d, store, _ := newDriver(t)
	class := amazonEC2Class(cloud)
	record := func() Record {
		r, _ := store.Get(ctx, "ec2-mid")
		return r
	}

	hold.Store(true)
	attempt, stop := context.WithCancel(ctx)
	created := make(chan error, 1)
	go func() {
		_, err := d.Create(attempt, drivers.Machine{Name: "ec2-mid", Class: class})
		created <- err
	}()
	var launched string
	require.Eventually(t, func() bool {
		if live := liveInstances(t, ec2c); len(live) == 1 {
			launched = aws.ToString(live[0].InstanceId)
		}
		return launched != ""
	}, time.Minute, 50*time.Millisecond, "RunInstances answered")
	assert.Eventually(t, func() bool {
		return strings.Contains(string(record().Config), launched)
	}, 30*time.Second, 50*time.Millisecond, "the record learns the instance id while Create waits")
	stop()
	require.Error(t, <-created)
	hold.Store(false)
	require.False(t, record().Created)

	_, err := d.Create(ctx, drivers.Machine{Name: "ec2-mid", Class: class})
	require.NoError(t, err)
	var ids []string
	for _, i := range liveInstances(t, ec2c) {
		ids = append(ids, aws.ToString(i.InstanceId))
	}
	require.Len(t, ids, 1, "the instance of the stopped attempt is terminated")
	assert.NotEqual(t, launched, ids[0])
	keyPairs, err := ec2c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
	require.NoError(t, err)
	assert.Len(t, keyPairs.KeyPairs, 1, "and its key pair deleted")

	require.NoError(t, d.Delete(ctx, class, "ec2-mid"))
	assert.Empty(t, liveInstances(t, ec2c))
	assertNoPluginLeft(t)
}

// TestAmazonEC2OptionsATenantCannotOverride: by amazonec2's own flags, a
// class may not let its NodeSets set the options through which the plugin
// would send the class's AWS keys to another endpoint, or read a file of
// the node controller's host for the tenant's machine; it may let them set
// the instance type.
func TestAmazonEC2OptionsATenantCannotOverride(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	for option, allowed := range map[string]bool{
		"amazonec2-endpoint":      false, // the AWS keys sign every request sent there
		"amazonec2-userdata":      false, // a file the plugin reads
		"amazonec2-ssh-keypath":   false, // a key the plugin copies and imports
		"amazonec2-instance-type": true,
		"amazonec2-root-size":     true,
	} {
		class := amazonEC2Class(framework.MotoEC2{Endpoint: "http://127.0.0.1:1", Network: framework.MotoNetwork{VPC: "vpc-1", Subnet: "subnet-1", Image: "ami-1"}})
		class.Spec.DockerMachine.Provisioning = nil
		class.Spec.TenantOverrides = []string{"options." + option}
		err := d.Validate(ctx, class)
		if allowed {
			assert.NoError(t, err, option)
			continue
		}
		if assert.Error(t, err, option) {
			assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, option)
			assert.Contains(t, err.Error(), "spec.tenantOverrides[0]", option)
		}
	}
	assertNoPluginLeft(t)
}

// TestAnAmazonEC2CreateStoppedBeforeLaunchIsRemovedOnDelete: amazonec2's
// Create imports a key pair before it launches the instance. An attempt
// that stops in between (RunInstances held back until the plugin is gone)
// leaves a record whose configuration names the key pair and no instance;
// its Node is then deleted, not tried again. Asked for the state of an
// instance it has no id of, amazonec2 answers with moto's
// InvalidInstanceID.NotFound ("The instance ID ... does not exist", for
// the empty id); its Remove deletes a key pair whose instance was never
// made ("we may have generated a key but failed to create an instance"),
// so Delete must call it even though the instance cannot be found.
func TestAnAmazonEC2CreateStoppedBeforeLaunchIsRemovedOnDelete(t *testing.T) {
	ctx := context.Background()
	cloud, hold := motoHolding(t, "RunInstances")
	ec2c := cloud.EC2
	d, store, _ := newDriver(t)
	class := amazonEC2Class(cloud)
	keyPairs := func() []string {
		out, err := ec2c.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
		require.NoError(t, err)
		var names []string
		for _, k := range out.KeyPairs {
			names = append(names, aws.ToString(k.KeyName))
		}
		return names
	}

	hold.Store(true)
	attempt, stop := context.WithCancel(ctx)
	created := make(chan error, 1)
	go func() {
		_, err := d.Create(attempt, drivers.Machine{Name: "ec2-early", Class: class})
		created <- err
	}()
	var imported string
	require.Eventually(t, func() bool {
		if names := keyPairs(); len(names) == 1 {
			imported = names[0]
		}
		return imported != ""
	}, time.Minute, 50*time.Millisecond, "the key pair is imported")
	require.Eventually(t, func() bool {
		r, _ := store.Get(ctx, "ec2-early")
		return strings.Contains(string(r.Config), imported)
	}, 30*time.Second, 50*time.Millisecond, "the record learns the key pair while Create waits")
	stop()
	require.Error(t, <-created)
	hold.Store(false)
	require.Empty(t, liveInstances(t, ec2c), "no instance was launched")
	r, err := store.Get(ctx, "ec2-early")
	require.NoError(t, err)
	require.False(t, r.Created)

	require.NoError(t, d.Delete(ctx, class, "ec2-early"))
	assert.Empty(t, keyPairs(), "the key pair of the stopped attempt is deleted")
	_, err = store.Get(ctx, "ec2-early")
	assert.ErrorIs(t, err, drivers.ErrNotFound)
	assertNoPluginLeft(t)
}

// motoHolding starts moto's EC2 with one action held: once hold is set, a
// request for action is answered only when its client goes (the plugin
// killed).
func motoHolding(t *testing.T, action string) (cloud framework.MotoEC2, hold *atomic.Bool) {
	hold = new(atomic.Bool)
	cloud = framework.StartMotoEC2(t, func(_ http.ResponseWriter, r *http.Request, _ []byte, form url.Values) bool {
		if form.Get("Action") != action || !hold.Load() {
			return false
		}
		<-r.Context().Done()
		return true
	})
	return cloud, hold
}

// TestAnAmazonEC2MachineGoesWithTheClassCurrentCredentials: the class's
// AWS access key is rotated (the Secret holds a new one, the old one is
// deleted at AWS, which then refuses it: AuthFailure) while a machine made
// with the old one runs. rancher/machine's amazonec2 takes its
// credentials, when it loads a saved configuration, from the environment
// variables of their flags (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), as
// rancher-machine is given the current ones; the machine's state and
// removal go through with the class's current key, and are not stuck on
// the one saved at its Create.
func TestAnAmazonEC2MachineGoesWithTheClassCurrentCredentials(t *testing.T) {
	ctx := context.Background()
	var revoked atomic.Value // the access key id AWS no longer takes
	var refused atomic.Int32
	cloud := framework.StartMotoEC2(t, func(w http.ResponseWriter, r *http.Request, _ []byte, _ url.Values) bool {
		key, _ := revoked.Load().(string)
		if key == "" || !strings.Contains(r.Header.Get("Authorization"), "Credential="+key+"/") {
			return false
		}
		refused.Add(1)
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>AuthFailure</Code><Message>AWS was not able to validate the provided access credentials</Message></Error></Errors><RequestID>0d1e5a2c-7b4f-4c1e-8f0a-3c2b9d6e5f71</RequestID></Response>`))
		return true
	})
	d, store, _ := newDriver(t)
	class := amazonEC2Class(cloud)
	_, err := d.Create(ctx, drivers.Machine{Name: "ec2-rotated", Class: class})
	require.NoError(t, err)
	require.Len(t, liveInstances(t, cloud.EC2), 1)

	const newAccessKey, newSecretKey = "AKIAROTATEDEC2KEY9X4", "rotated/EC2+secret+Jd7pQ2sV"
	class.Credentials = map[string][]byte{"access-key": []byte(newAccessKey), "secret-key": []byte(newSecretKey)}
	revoked.Store(ec2AccessKey)

	status, err := d.Get(ctx, class, "ec2-rotated")
	require.NoError(t, err, "the state is asked with the class's current key")
	assert.Equal(t, drivers.MachineRunning, status.State)
	require.NoError(t, d.Delete(ctx, class, "ec2-rotated"), "the machine is removed with the class's current key")
	assert.Empty(t, liveInstances(t, cloud.EC2), "its instance is terminated")
	keyPairs, err := cloud.EC2.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{})
	require.NoError(t, err)
	assert.Empty(t, keyPairs.KeyPairs, "and its key pair deleted")
	assert.Empty(t, store.records)
	assert.Zero(t, refused.Load(), "no call went out with the revoked key")
	assertNoPluginLeft(t)
}
