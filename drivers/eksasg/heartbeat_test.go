package eksasg

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// refusingLifecycle answers every heartbeat and completion with err, as
// Auto Scaling does for an action it no longer knows. moto implements
// neither call.
type refusingLifecycle struct {
	err   error
	beats int
}

func (r *refusingLifecycle) CompleteLifecycleAction(context.Context, *autoscaling.CompleteLifecycleActionInput, ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	return nil, r.err
}

func (r *refusingLifecycle) RecordLifecycleActionHeartbeat(context.Context, *autoscaling.RecordLifecycleActionHeartbeatInput, ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	r.beats++
	return nil, r.err
}

// TestAHeartbeatForAnActionThatIsOverIsNoError: Auto Scaling answers a
// heartbeat for an action it no longer waits on (the hook timed out, or the
// action was completed) with a ValidationError, "No active Lifecycle Action
// found with token". The instance is terminating already: nothing is left
// to keep waiting, and the drain that asked must not fail on it. A refusal
// of another kind is still an error.
func TestAHeartbeatForAnActionThatIsOverIsNoError(t *testing.T) {
	ctx := context.Background()
	class := drivers.Class{Name: "spot", Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverEKSASG,
		DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: region,
			Interruptions: &nodesetv1alpha1.EKSInterruptions{QueueURL: "https://sqs." + region + ".amazonaws.com/111122223333/nodeset-interruptions"}}}}}
	action := drivers.LifecycleAction{Group: "g", Hook: HookName, Token: "87654321-4321-4321-4321-210987654321", MachineID: "i-0aaa"}
	for _, tc := range []struct {
		name    string
		err     error
		wantErr error
	}{
		{name: "no active action", err: &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with token 87654321-4321-4321-4321-210987654321", Fault: smithy.FaultClient}},
		{name: "throttled", err: &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded", Fault: smithy.FaultClient}, wantErr: drivers.ErrThrottled},
		{name: "not allowed", err: &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform: autoscaling:RecordLifecycleActionHeartbeat", Fault: smithy.FaultClient}, wantErr: drivers.ErrInvalidConfiguration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lifecycle := &refusingLifecycle{err: tc.err}
			d := New(Options{Cluster: "prod",
				Clients: func(context.Context, string, map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
					return nil, nil, nil
				},
				Lifecycle: func(context.Context, string, map[string][]byte) (LifecycleActions, error) { return lifecycle, nil }})
			err := d.RecordLifecycleHeartbeat(ctx, class, action)
			require.Equal(t, 1, lifecycle.beats)
			if tc.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tc.wantErr)
		})
	}
}
