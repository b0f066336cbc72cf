package eksmanaged

import (
	"context"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// throttledAfterTermination passes calls to moto, but throttles the first
// look at the groups after a termination.
type throttledAfterTermination struct {
	awscloud.AutoScaling
	mu         sync.Mutex
	terminated bool
}

func (a *throttledAfterTermination) TerminateInstanceInAutoScalingGroup(ctx context.Context, in *autoscaling.TerminateInstanceInAutoScalingGroupInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error) {
	out, err := a.AutoScaling.TerminateInstanceInAutoScalingGroup(ctx, in, opts...)
	a.mu.Lock()
	a.terminated = err == nil
	a.mu.Unlock()
	return out, err
}

func (a *throttledAfterTermination) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	a.mu.Lock()
	throttle := a.terminated
	a.terminated = false
	a.mu.Unlock()
	if throttle {
		return nil, &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	}
	return a.AutoScaling.DescribeAutoScalingGroups(ctx, in, opts...)
}

// TestATerminationRetriedAfterAThrottleLowersTheNodeGroup: the
// termination went through but the look that follows it was throttled, so
// the call failed and is retried. The retry finds the instance terminating
// already; the node group's desired size must still follow the Auto Scaling
// group's, or a later change of the node group (its labels, its size)
// writes the old size back and EKS launches a replacement.
func TestATerminationRetriedAfterAThrottleLowersTheNodeGroup(t *testing.T) {
	ctx := context.Background()
	w, fake, _ := managedWorld(t)
	throttled := &throttledAfterTermination{AutoScaling: w.api.AutoScaling}
	d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
		return API{EKS: fake, AutoScaling: throttled, EC2: w.api.EC2}, nil
	}})
	status, err := d.DescribeGroup(ctx, w.class(), "ng")
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	victim := status.Machines[0].ProviderID

	err = d.TerminateMachine(ctx, w.class(), "ng", victim)
	require.ErrorIs(t, err, drivers.ErrThrottled)
	require.NoError(t, d.TerminateMachine(ctx, w.class(), "ng", victim), "the retry")
	assert.EqualValues(t, 1, aws.ToInt32(fake.groups["ng"].ScalingConfig.DesiredSize), "EKS's desired size follows the decrement")
}
