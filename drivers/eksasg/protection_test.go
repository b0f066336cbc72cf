package eksasg

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// capacityBackWhileLowered is shortOfCapacity whose capacity comes back in
// the moment between the driver's fresh look at a short group and its
// lowering: Auto Scaling launches what the group wanted, and the lowering
// then finds more instances than the new desired capacity.
type capacityBackWhileLowered struct {
	*shortOfCapacity
	t *testing.T
}

func (c capacityBackWhileLowered) SetDesiredCapacity(ctx context.Context, in *autoscaling.SetDesiredCapacityInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.SetDesiredCapacityOutput, error) {
	c.mu.Lock()
	short := c.capacity < 100
	c.mu.Unlock()
	if short && c.desiredSet(aws.ToString(in.AutoScalingGroupName)) > aws.ToInt32(in.DesiredCapacity) {
		c.release(ctx, c.t)
	}
	return c.shortOfCapacity.SetDesiredCapacity(ctx, in, opts...)
}

// TestALaunchWhileAShortGroupIsLoweredTerminatesNoInstance: Auto Scaling
// may launch the instances a short group wants between the driver's fresh
// look and its lowering of the desired capacity. The group then has more
// instances than it wants, and Auto Scaling scales in: every instance of
// the group is protected from scale-in, so it terminates none (moto, like
// AWS, scales in only unprotected instances), and the desired capacity is
// raised back to the instances the group runs, so each of nodeset's
// terminations can take its decrement. The extra instances are the
// NodeSet's to remove, drained.
func TestALaunchWhileAShortGroupIsLoweredTerminatesNoInstance(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	now := time.Unix(1_800_000_000, 0)
	short := &shortOfCapacity{capacity: 1, wanted: map[string]int32{}}
	d := New(Options{Cluster: "prod", PollInterval: time.Minute, Now: func() time.Time { return now },
		Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
			asg, ec2c, err := real(ctx, r, creds)
			short.AutoScaling = asg
			return capacityBackWhileLowered{short, t}, ec2c, err
		}})
	web := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-web"},
		Class: w.class(), Replicas: 3, MaxReplicas: 3, TemplateHash: "h1"}
	status, err := d.EnsureGroup(ctx, web)
	require.NoError(t, err)
	require.Len(t, status.Machines, 1)
	first := status.Machines[0].ProviderID // the instance that has a Node, with pods

	web.Replicas = 1
	now = now.Add(time.Minute)
	status, err = d.EnsureGroup(ctx, web)
	require.NoError(t, err)

	assert.Equal(t, ec2types.InstanceStateNameRunning, w.state(t, first), "Auto Scaling picked no victim among the instances that run pods")
	g := w.describe(t, web.Name)
	running := 0
	for _, i := range g.Instances {
		if i.LifecycleState == asgtypes.LifecycleStateInService {
			running++
		}
	}
	assert.Equal(t, 3, running, "no instance was scaled in")
	assert.EqualValues(t, running, aws.ToInt32(g.DesiredCapacity), "the desired capacity is back at the instances the group runs")
	assert.EqualValues(t, running, status.DesiredSize)
	status, err = d.EnsureGroup(ctx, web)
	require.NoError(t, err)
	assert.Len(t, status.Machines, running, "the extra instances become Nodes, for the NodeSet to remove")
}

// TestGroupsMadeBeforeScaleInProtectionAreBroughtAlong: a group without
// scale-in protection (made by an older node controller, or changed by
// hand) gets it on the next look, for the instances it will launch and for
// those it runs; an instance whose protection someone removed gets it
// back. A desired capacity lowered by hand afterwards terminates nothing.
func TestGroupsMadeBeforeScaleInProtectionAreBroughtAlong(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	web := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-web"},
		Class: w.class(), Replicas: 3, MaxReplicas: 3, TemplateHash: "h1"}
	status, err := d.EnsureGroup(ctx, web)
	require.NoError(t, err)
	require.Len(t, status.Machines, 3)
	client := w.asg.(*autoscaling.Client)
	unprotect := func(ids ...string) {
		_, err := client.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{AutoScalingGroupName: aws.String(web.Name),
			InstanceIds: ids, ProtectedFromScaleIn: aws.Bool(false)})
		require.NoError(t, err)
	}
	var ids []string
	for _, i := range w.describe(t, web.Name).Instances {
		ids = append(ids, aws.ToString(i.InstanceId))
	}
	protected := func(look string) {
		t.Helper()
		g := w.describe(t, web.Name)
		assert.True(t, aws.ToBool(g.NewInstancesProtectedFromScaleIn), "%s: the instances it launches are protected", look)
		for _, i := range g.Instances {
			assert.True(t, aws.ToBool(i.ProtectedFromScaleIn), "%s: %s is protected", look, aws.ToString(i.InstanceId))
		}
	}

	// As an older node controller left it.
	_, err = client.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String(web.Name),
		NewInstancesProtectedFromScaleIn: aws.Bool(false)})
	require.NoError(t, err)
	unprotect(ids...)
	d.invalidate(region, web.Class.Credentials)
	_, err = d.EnsureGroup(ctx, web)
	require.NoError(t, err)
	protected("an older group")

	// One instance's protection removed by hand: the shared look sees it.
	unprotect(ids[1])
	d.invalidate(region, web.Class.Credentials)
	_, err = d.EnsureGroup(ctx, web)
	require.NoError(t, err)
	protected("an instance unprotected by hand")

	_, err = client.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(web.Name), DesiredCapacity: aws.Int32(1)})
	require.NoError(t, err)
	assert.Len(t, w.describe(t, web.Name).Instances, 3, "a desired capacity lowered by hand makes Auto Scaling terminate none of them")
}

// TestDeletingAProtectedGroupTakesItsInstances: scale-in protection does
// not keep a group's instances from going with it. AWS's ForceDelete
// terminates protected instances too; moto's terminates only unprotected
// ones, so the driver removes the protection first, and no instance
// outlives its NodeSet's group on either.
func TestDeletingAProtectedGroupTakesItsInstances(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	web := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-web"},
		Class: w.class(), Replicas: 2, MaxReplicas: 2, TemplateHash: "h1"}
	status, err := d.EnsureGroup(ctx, web)
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	deadline := time.Now().Add(30 * time.Second)
	for err = d.DeleteGroup(ctx, web.Class, web.Name); err != nil; err = d.DeleteGroup(ctx, web.Class, web.Name) {
		require.ErrorIs(t, err, drivers.ErrInProgress)
		require.True(t, time.Now().Before(deadline), "the group is not gone: %v", err)
	}
	for _, m := range status.Machines {
		assert.Contains(t, []ec2types.InstanceStateName{ec2types.InstanceStateNameShuttingDown, ec2types.InstanceStateNameTerminated},
			w.state(t, m.ProviderID), "%s went with its group", m.ProviderID)
	}
}
