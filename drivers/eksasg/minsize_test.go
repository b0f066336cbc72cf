package eksasg

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// minSizeEnforced is Auto Scaling that refuses a termination with decrement
// below the group's minimum size, as AWS does and moto does not.
type minSizeEnforced struct {
	awscloud.AutoScaling
}

func (m minSizeEnforced) TerminateInstanceInAutoScalingGroup(ctx context.Context, in *autoscaling.TerminateInstanceInAutoScalingGroupInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error) {
	if aws.ToBool(in.ShouldDecrementDesiredCapacity) {
		found, err := m.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{aws.ToString(in.InstanceId)}})
		if err != nil {
			return nil, err
		}
		for _, i := range found.AutoScalingInstances {
			g, err := awscloud.FindGroup(ctx, m.AutoScaling, aws.ToString(i.AutoScalingGroupName))
			if err != nil {
				return nil, err
			}
			if aws.ToInt32(g.DesiredCapacity) <= aws.ToInt32(g.MinSize) {
				return nil, &smithy.GenericAPIError{Code: "ValidationError", Message: fmt.Sprintf("Currently, desiredSize equals minSize (%d). "+
					"Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity "+
					"flag to false or lower group's min size constraint.", aws.ToInt32(g.MinSize))}
			}
		}
	}
	return m.AutoScaling.TerminateInstanceInAutoScalingGroup(ctx, in, opts...)
}

// TestTheLastTerminationBelowTheMinimumSizeGoesWithoutTheDecrement: a
// group whose desired capacity is below the instances it runs (an instance
// AWS launched while it was lowered, listed too late to raise it back)
// has its decrement refused at the minimum size; its instance is then
// terminated without the decrement, which launches nothing, since the
// group still has at least what it wants. Where terminating without the
// decrement would make Auto Scaling launch a replacement (the group runs
// no more than it wants), the refusal stands.
func TestTheLastTerminationBelowTheMinimumSizeGoesWithoutTheDecrement(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	real := awscloud.SDKClients(w.endpoint)
	d := New(Options{Cluster: "prod", Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		asg, ec2c, err := real(ctx, r, creds)
		return minSizeEnforced{asg}, ec2c, err
	}})
	class := w.class()
	for _, tc := range []struct {
		name               string
		minSize, replicas  int32
		lowerTo            int32
		wantTerminated     bool
		wantDesired, wantN int32
	}{
		{"over the desired capacity at 0", 0, 2, 0, true, 0, 1},
		{"over the desired capacity at the minimum", 1, 2, 1, true, 1, 1},
		{"at the desired capacity at the minimum", 1, 1, 1, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("set-%d-%d", tc.minSize, tc.replicas)
			group := drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name},
				Class: class, Replicas: tc.replicas, MinReplicas: tc.minSize, MaxReplicas: 3, TemplateHash: "h1"}
			status, err := d.EnsureGroup(ctx, group)
			require.NoError(t, err)
			require.Len(t, status.Machines, int(tc.replicas))
			// Protected from scale-in, no instance goes.
			_, err = w.asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(group.Name), DesiredCapacity: aws.Int32(tc.lowerTo)})
			require.NoError(t, err)
			g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
			require.NoError(t, err)
			require.Len(t, g.Instances, int(tc.replicas))

			err = d.TerminateMachine(ctx, class, group.Name, status.Machines[0].ProviderID)
			if tc.wantTerminated {
				require.NoError(t, err)
			} else {
				require.Error(t, err, "terminating without the decrement would launch a replacement")
				assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			}
			g, err = awscloud.FindGroup(ctx, w.asg, group.Name)
			require.NoError(t, err)
			assert.EqualValues(t, tc.wantDesired, aws.ToInt32(g.DesiredCapacity), "the desired capacity")
			assert.EqualValues(t, tc.wantN, liveInstances(g), "instances left, none launched")
		})
	}
}

// meetingReads is Auto Scaling whose next two group reads, once armed,
// wait for each other (or for a second, if the other never comes): two
// terminations that read the group are made to do so at once.
type meetingReads struct {
	minSizeEnforced
	mu      sync.Mutex
	waiting int           // reads still to meet: 2 once armed
	met     chan struct{} // closed when the second of them comes
}

// arm makes the next two group reads meet.
func (m *meetingReads) arm() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.waiting, m.met = 2, make(chan struct{})
}

func (m *meetingReads) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	m.mu.Lock()
	met, wait := m.met, false
	if m.waiting > 0 {
		m.waiting--
		if m.waiting == 0 {
			close(m.met)
		} else {
			wait = true
		}
	}
	m.mu.Unlock()
	if wait {
		select {
		case <-met:
		case <-time.After(time.Second): // the other waits its turn
		}
	}
	return m.minSizeEnforced.DescribeAutoScalingGroups(ctx, in, opts...)
}

// TestTwoTerminationsOverTheDesiredCapacityTakeTurns: a group runs one
// instance over its desired capacity, which is at its minimum, and both
// its instances are terminated at once. Only one may go without the
// decrement: the other's refusal stands, or Auto Scaling would launch an
// instance to bring the group back to its desired capacity.
func TestTwoTerminationsOverTheDesiredCapacityTakeTurns(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	asg, ec2c, err := awscloud.SDKClients(w.endpoint)(ctx, region, testCredentials)
	require.NoError(t, err)
	reads := &meetingReads{minSizeEnforced: minSizeEnforced{asg}}
	d := New(Options{Cluster: "prod", Clients: func(context.Context, string, map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		return reads, ec2c, nil
	}})
	class := w.class()
	group := drivers.Group{Name: GroupName("prod", "team-a", "pair"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "pair"},
		Class: class, Replicas: 2, MinReplicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	_, err = w.asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(group.Name), DesiredCapacity: aws.Int32(1)})
	require.NoError(t, err)
	reads.arm() // the next two group reads are the terminations'

	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, m := range status.Machines {
		wg.Go(func() { errs[i] = d.TerminateMachine(ctx, class, group.Name, m.ProviderID) })
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if err != nil {
			assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			refused++
		}
	}
	assert.Equal(t, 1, refused, "one termination goes without the decrement, the other is refused: %v", errs)
	g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
	require.NoError(t, err)
	assert.EqualValues(t, 1, aws.ToInt32(g.DesiredCapacity), "the desired capacity")
	assert.EqualValues(t, 1, awscloud.Counted(g), "one instance left, as the group wants: none to launch")
}

// liveInstances counts the group's instances that are not terminating.
func liveInstances(g *asgtypes.AutoScalingGroup) int {
	live := 0
	for _, i := range g.Instances {
		if !strings.HasPrefix(string(i.LifecycleState), "Terminat") {
			live++
		}
	}
	return live
}
