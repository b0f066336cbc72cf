package eksasg

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// lostResponse is Auto Scaling whose terminations fail with err: after
// the call is made (done, a response lost on the way back), or without it.
type lostResponse struct {
	awscloud.AutoScaling
	done bool
	err  func(id string) error
}

func (l lostResponse) TerminateInstanceInAutoScalingGroup(ctx context.Context, in *autoscaling.TerminateInstanceInAutoScalingGroupInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error) {
	if l.done {
		if _, err := l.AutoScaling.TerminateInstanceInAutoScalingGroup(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return nil, l.err(aws.ToString(in.InstanceId))
}

// TestATerminationWhoseAnswerWasLostIsDone: a termination whose response
// is lost did its work; the SDK's retry of it finds the instance out of
// the group, which AWS refuses with a ValidationError (moto with a 500).
// TerminateMachine reports success, not a refusal (a ValidationError reads
// as a configuration the cloud refuses). A termination that failed without
// doing anything is still reported, the instance left in its group. One
// case takes the path of a group over its desired capacity at its minimum
// (the decrement refused, the instance terminated without it): there a
// CI run saw moto answer 500 to all five attempts of the call, as it
// answers every call for an instance in no group.
func TestATerminationWhoseAnswerWasLostIsDone(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	notFound := func(id string) error {
		return &smithy.GenericAPIError{Code: "ValidationError", Message: "Instance Id not found - No managed instance found for instance ID: " + id}
	}
	serverError := func(string) error {
		return &smithy.GenericAPIError{Code: "InternalFailure", Message: "the server failed"}
	}
	for i, tc := range []struct {
		name       string
		overDesire bool // the group's desired capacity lowered to its minimum, 0, below its 2 instances
		done       bool
		err        func(string) error
		wantErr    error // nil: the termination is reported done
		wantN      int32 // instances left
		wantDesire int32
	}{
		{"answered with no such instance on the retry", false, true, notFound, nil, 1, 1},
		{"answered with a server error", false, true, serverError, nil, 1, 1},
		{"over the desired capacity, answered with a server error", true, true, serverError, nil, 1, 0},
		{"refused without doing it", false, false, notFound, drivers.ErrInvalidConfiguration, 2, 2},
		{"failed without doing it", false, false, serverError, errors.New("InternalFailure"), 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real := awscloud.SDKClients(w.endpoint)
			d := New(Options{Cluster: "prod", Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
				asg, ec2c, err := real(ctx, r, creds)
				var lost awscloud.AutoScaling = lostResponse{AutoScaling: asg, done: tc.done, err: tc.err}
				if tc.overDesire {
					lost = minSizeEnforced{lost}
				}
				return lost, ec2c, err
			}})
			class := w.class()
			name := fmt.Sprintf("lost-%d", i)
			group := drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name},
				Class: class, Replicas: 2, MaxReplicas: 3, TemplateHash: "h1"}
			status, err := d.EnsureGroup(ctx, group)
			require.NoError(t, err)
			require.Len(t, status.Machines, 2)
			if tc.overDesire {
				_, err = w.asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(group.Name), DesiredCapacity: aws.Int32(0)})
				require.NoError(t, err)
			}

			err = d.TerminateMachine(ctx, class, group.Name, status.Machines[0].ProviderID)
			switch {
			case tc.wantErr == nil:
				require.NoError(t, err)
			case errors.Is(tc.wantErr, drivers.ErrInvalidConfiguration):
				require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			default:
				require.ErrorContains(t, err, tc.wantErr.Error())
			}
			g, err := awscloud.FindGroup(ctx, w.asg, group.Name)
			require.NoError(t, err)
			assert.EqualValues(t, tc.wantDesire, aws.ToInt32(g.DesiredCapacity), "the desired capacity")
			assert.EqualValues(t, tc.wantN, liveInstances(g), "instances left in the group")
		})
	}
}
