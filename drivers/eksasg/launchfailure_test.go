package eksasg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// shortOfCapacity stands in front of moto for what moto does not model: a
// zone without capacity for the instance type. As on AWS, a desired
// capacity above what can be launched is accepted, the group runs fewer
// instances, and the failure is only in its scaling activities (moto
// launches every instance at once and records no activity).
type shortOfCapacity struct {
	awscloud.AutoScaling
	mu       sync.Mutex
	capacity int32            // instances AWS can launch, per group
	wanted   map[string]int32 // desired capacity the driver set, by group
	looks    int              // DescribeScalingActivities calls
}

func (s *shortOfCapacity) launchable(name string, desired *int32) *int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wanted[name] = aws.ToInt32(desired)
	return aws.Int32(min(aws.ToInt32(desired), s.capacity))
}

func (s *shortOfCapacity) CreateAutoScalingGroup(ctx context.Context, in *autoscaling.CreateAutoScalingGroupInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.CreateAutoScalingGroupOutput, error) {
	copied := *in
	copied.DesiredCapacity = s.launchable(aws.ToString(in.AutoScalingGroupName), in.DesiredCapacity)
	return s.AutoScaling.CreateAutoScalingGroup(ctx, &copied, opts...)
}

func (s *shortOfCapacity) SetDesiredCapacity(ctx context.Context, in *autoscaling.SetDesiredCapacityInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.SetDesiredCapacityOutput, error) {
	copied := *in
	copied.DesiredCapacity = s.launchable(aws.ToString(in.AutoScalingGroupName), in.DesiredCapacity)
	return s.AutoScaling.SetDesiredCapacity(ctx, &copied, opts...)
}

func (s *shortOfCapacity) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	out, err := s.AutoScaling.DescribeAutoScalingGroups(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range out.AutoScalingGroups {
		g := &out.AutoScalingGroups[i]
		if wanted, ok := s.wanted[aws.ToString(g.AutoScalingGroupName)]; ok && wanted > aws.ToInt32(g.DesiredCapacity) {
			g.DesiredCapacity = aws.Int32(wanted) // what AWS reports: the desired capacity, not what runs
		}
	}
	return out, nil
}

func (s *shortOfCapacity) DescribeScalingActivities(ctx context.Context, in *autoscaling.DescribeScalingActivitiesInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeScalingActivitiesOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.looks++
	if s.wanted[aws.ToString(in.AutoScalingGroupName)] <= s.capacity {
		return &autoscaling.DescribeScalingActivitiesOutput{}, nil
	}
	// The shape of AWS's answer for a launch without capacity.
	return &autoscaling.DescribeScalingActivitiesOutput{Activities: []asgtypes.Activity{{
		ActivityId: aws.String("5e3a1b2c"), AutoScalingGroupName: in.AutoScalingGroupName,
		Description: aws.String("Launching a new EC2 instance.  Status Reason: We currently do not have sufficient t3.large capacity in the " +
			"Availability Zone you requested (us-east-1a). Launching EC2 instance failed."),
		Cause:      aws.String("At 2026-11-26T10:00:00Z an instance was started in response to a difference between desired and actual capacity."),
		StartTime:  aws.Time(time.Now()),
		StatusCode: asgtypes.ScalingActivityStatusCodeFailed,
		StatusMessage: aws.String("We currently do not have sufficient t3.large capacity in the Availability Zone you requested (us-east-1a). " +
			"Our system will be working on provisioning additional capacity. Launching EC2 instance failed."),
	}}}, nil
}

// release gives AWS the capacity again: the group launches what it wants.
func (s *shortOfCapacity) release(ctx context.Context, t *testing.T) {
	s.mu.Lock()
	s.capacity = 100
	wanted := s.wanted
	s.mu.Unlock()
	for name, desired := range wanted {
		_, err := s.AutoScaling.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(name), DesiredCapacity: aws.Int32(desired)})
		require.NoError(t, err)
	}
}

func (s *shortOfCapacity) activityLooks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.looks
}

// TestALaunchAWSCannotMakeIsTheGroupsMessage: Auto Scaling takes a desired
// capacity it cannot reach (no capacity in the zone, an image deregistered
// since, a spot price below the market) without an error, and keeps
// trying; the failure is only in its scaling activities. It reaches
// status.group.message (so ReplicaFailure), on the call that raised the
// group and on every later look while the group is short, and goes once
// the instances run. The activities are read only for a short group, and
// at most once per poll interval.
func TestALaunchAWSCannotMakeIsTheGroupsMessage(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	aws0 := &shortOfCapacity{capacity: 1, wanted: map[string]int32{}}
	now := time.Unix(1_800_000_000, 0)
	d := New(Options{Cluster: "prod", PollInterval: time.Minute, Now: func() time.Time { return now },
		Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
			asg, ec2c, err := real(ctx, r, creds)
			aws0.AutoScaling = asg
			return aws0, ec2c, err
		}})
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"},
		Class: w.class(), Replicas: 3, MaxReplicas: 3, TemplateHash: "h1"}

	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err, "AWS accepts the desired capacity")
	assert.EqualValues(t, 3, status.DesiredSize)
	assert.Len(t, status.Machines, 1, "one instance could be launched")
	assert.Contains(t, status.Message, "do not have sufficient t3.large capacity", "the failure is the group's message")
	assert.Contains(t, status.Message, "1 of 3")
	t.Logf("message: %s", status.Message)

	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, status.Message, "sufficient t3.large capacity", "every look at the short group says so")
	assert.Equal(t, 1, aws0.activityLooks(), "a short group's activities are read once per poll interval")

	aws0.release(ctx, t)
	now = now.Add(2 * time.Minute)
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Len(t, status.Machines, 3)
	assert.Empty(t, status.Message, "the message goes once the instances run")
	assert.Equal(t, 1, aws0.activityLooks(), "a group that runs what it wants costs no look at its activities")
}
