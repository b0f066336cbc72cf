package eksasg

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// launching is shortOfCapacity with a launch on its way: the group's
// latest scaling activity is in progress.
type launching struct{ *shortOfCapacity }

func (l launching) DescribeScalingActivities(ctx context.Context, in *autoscaling.DescribeScalingActivitiesInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeScalingActivitiesOutput, error) {
	return &autoscaling.DescribeScalingActivitiesOutput{Activities: []asgtypes.Activity{{
		ActivityId: aws.String("7f1c"), AutoScalingGroupName: in.AutoScalingGroupName, StartTime: aws.Time(time.Now()),
		Description: aws.String("Launching a new EC2 instance: i-0abc"), StatusCode: asgtypes.ScalingActivityStatusCodeInProgress,
	}}}, nil
}

func (s *shortOfCapacity) desiredSet(name string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wanted[name]
}

// TestAGroupAWSCannotFillIsLoweredToWhatTheSetAsks: a NodeSet scaled down
// while Auto Scaling cannot launch its instances has no Node to remove;
// the group's desired capacity goes down to what the set asks for, so the
// instances nobody wants are not launched once the capacity is back (to
// be drained and terminated again), and the group is no longer short. It
// never goes below the instances the group has, which would make Auto
// Scaling pick victims, nor while a launch is on its way.
func TestAGroupAWSCannotFillIsLoweredToWhatTheSetAsks(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	now := time.Unix(1_800_000_000, 0)
	newDriver := func(wrap func(awscloud.AutoScaling) awscloud.AutoScaling) *Driver {
		return New(Options{Cluster: "prod", PollInterval: time.Minute, Now: func() time.Time { return now },
			Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
				asg, ec2c, err := real(ctx, r, creds)
				return wrap(asg), ec2c, err
			}})
	}
	group := func(name string, replicas int32) drivers.Group {
		return drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name, UID: types.UID("uid-" + name)},
			Class: w.class(), Replicas: replicas, MaxReplicas: 3, TemplateHash: "h1"}
	}

	t.Run("scaled down while short", func(t *testing.T) {
		aws0 := &shortOfCapacity{capacity: 1, wanted: map[string]int32{}}
		d := newDriver(func(asg awscloud.AutoScaling) awscloud.AutoScaling { aws0.AutoScaling = asg; return aws0 })
		web := group("web", 3)
		status, err := d.EnsureGroup(ctx, web)
		require.NoError(t, err)
		require.EqualValues(t, 3, status.DesiredSize)
		require.Len(t, status.Machines, 1)

		web.Replicas = 2
		now = now.Add(time.Minute)
		status, err = d.EnsureGroup(ctx, web)
		require.NoError(t, err)
		assert.EqualValues(t, 2, status.DesiredSize, "lowered to what the set asks for")
		assert.EqualValues(t, 2, aws0.desiredSet(web.Name))
		assert.Contains(t, status.Message, "1 of 2", "still short of what the set asks for")

		web.Replicas = 1
		now = now.Add(time.Minute)
		status, err = d.EnsureGroup(ctx, web)
		require.NoError(t, err)
		assert.EqualValues(t, 1, status.DesiredSize)
		assert.Empty(t, status.Message, "the set has what it asks for: no ReplicaFailure")

		aws0.release(ctx, t)
		now = now.Add(time.Minute)
		status, err = d.EnsureGroup(ctx, web)
		require.NoError(t, err)
		assert.Len(t, status.Machines, 1, "nothing launched that nobody wants")
		assert.EqualValues(t, 1, aws.ToInt32(w.describe(t, web.Name).DesiredCapacity))
	})

	t.Run("never below the instances the group has", func(t *testing.T) {
		aws0 := &shortOfCapacity{capacity: 2, wanted: map[string]int32{}}
		d := newDriver(func(asg awscloud.AutoScaling) awscloud.AutoScaling { aws0.AutoScaling = asg; return aws0 })
		api := group("api", 3)
		_, err := d.EnsureGroup(ctx, api)
		require.NoError(t, err)
		api.Replicas = 0
		now = now.Add(time.Minute)
		status, err := d.EnsureGroup(ctx, api)
		require.NoError(t, err)
		assert.EqualValues(t, 2, status.DesiredSize, "the two instances stay: the NodeSet picks, drains and terminates its victims")
		assert.Len(t, w.describe(t, api.Name).Instances, 2)
	})

	t.Run("not while a launch is on its way", func(t *testing.T) {
		aws0 := &shortOfCapacity{capacity: 1, wanted: map[string]int32{}}
		d := newDriver(func(asg awscloud.AutoScaling) awscloud.AutoScaling { aws0.AutoScaling = asg; return launching{aws0} })
		jobs := group("jobs", 3)
		_, err := d.EnsureGroup(ctx, jobs)
		require.NoError(t, err)
		jobs.Replicas = 1
		now = now.Add(time.Minute)
		status, err := d.EnsureGroup(ctx, jobs)
		require.NoError(t, err)
		assert.EqualValues(t, 3, status.DesiredSize, "Auto Scaling may have an instance on its way: lowering now could make it pick a victim")
		assert.EqualValues(t, 3, aws0.desiredSet(jobs.Name))
	})
}
