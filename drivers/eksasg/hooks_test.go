package eksasg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// targetedHooks is moto's Auto Scaling client whose lifecycle hooks are
// described with the notification target of target ("" for none, which
// moto cannot tell: it describes every hook with a made-up target), and
// which records the hooks put.
type targetedHooks struct {
	awscloud.AutoScaling
	hooks  LifecycleHooks
	target string
	mu     sync.Mutex
	puts   []autoscaling.PutLifecycleHookInput
}

func (h *targetedHooks) DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, opts ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	out, err := h.hooks.DescribeLifecycleHooks(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range out.LifecycleHooks {
		out.LifecycleHooks[i].NotificationTargetARN = aws.String(h.target)
		out.LifecycleHooks[i].RoleARN = nil
	}
	return out, nil
}

func (h *targetedHooks) PutLifecycleHook(ctx context.Context, in *autoscaling.PutLifecycleHookInput, opts ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error) {
	h.mu.Lock()
	h.puts = append(h.puts, *in)
	if in.NotificationTargetARN != nil {
		h.target = *in.NotificationTargetARN
	}
	h.mu.Unlock()
	return h.hooks.PutLifecycleHook(ctx, in, opts...)
}

func (h *targetedHooks) DeleteLifecycleHook(ctx context.Context, in *autoscaling.DeleteLifecycleHookInput, opts ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error) {
	return h.hooks.DeleteLifecycleHook(ctx, in, opts...)
}

// TestAChangedHookIsPutBack: nodeset puts the termination hook on its
// groups and owns it. A hook found changed (its default result, its
// transition, its heartbeat timeout, a notification target added) is put
// back as the class says when the driver next looks at it (a restarted
// driver, here); one as nodeset put it costs no put.
func TestAChangedHookIsPutBack(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	name := GroupName("prod", "team-a", "hooked")
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{
		QueueURL: "https://sqs." + region + ".amazonaws.com/111122223333/nodeset-interruptions", HeartbeatTimeout: &metav1.Duration{Duration: 2 * time.Minute}}
	group := drivers.Group{Name: name, Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "hooked"}, Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	hooks := &targetedHooks{hooks: w.asg.(LifecycleHooks)}
	newDriver := func() *Driver {
		sdk := awscloud.SDKClients(w.endpoint)
		return New(Options{Cluster: "prod", Clients: func(ctx context.Context, region string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
			asg, ec2c, err := sdk(ctx, region, creds)
			if err != nil {
				return nil, nil, err
			}
			hooks.mu.Lock()
			hooks.AutoScaling = asg
			hooks.mu.Unlock()
			return hooks, ec2c, nil
		}})
	}
	_, err := newDriver().EnsureGroup(ctx, group)
	require.NoError(t, err)
	require.Len(t, hooks.puts, 1, "the hook is put")
	assert.Nil(t, hooks.puts[0].NotificationTargetARN, "a new hook is put with no target")

	describe := func() (result, transition string, heartbeat int32) {
		t.Helper()
		out, err := w.asg.(LifecycleHooks).DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(name)})
		require.NoError(t, err)
		require.Len(t, out.LifecycleHooks, 1)
		h := out.LifecycleHooks[0]
		return aws.ToString(h.DefaultResult), aws.ToString(h.LifecycleTransition), aws.ToInt32(h.HeartbeatTimeout)
	}
	for _, tc := range []struct {
		name   string
		change autoscaling.PutLifecycleHookInput
		target string
	}{
		{name: "default result ABANDON", change: autoscaling.PutLifecycleHookInput{DefaultResult: aws.String("ABANDON"),
			LifecycleTransition: aws.String(terminatingTransition), HeartbeatTimeout: aws.Int32(120)}},
		{name: "launching transition", change: autoscaling.PutLifecycleHookInput{DefaultResult: aws.String("CONTINUE"),
			LifecycleTransition: aws.String("autoscaling:EC2_INSTANCE_LAUNCHING"), HeartbeatTimeout: aws.Int32(120)}},
		{name: "heartbeat timeout", change: autoscaling.PutLifecycleHookInput{DefaultResult: aws.String("CONTINUE"),
			LifecycleTransition: aws.String(terminatingTransition), HeartbeatTimeout: aws.Int32(3600)}},
		{name: "a notification target", target: "arn:aws:sqs:" + region + ":111122223333:elsewhere",
			change: autoscaling.PutLifecycleHookInput{DefaultResult: aws.String("CONTINUE"),
				LifecycleTransition: aws.String(terminatingTransition), HeartbeatTimeout: aws.Int32(120)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			change := tc.change
			change.AutoScalingGroupName, change.LifecycleHookName = aws.String(name), aws.String(HookName)
			_, err := w.asg.(LifecycleHooks).PutLifecycleHook(ctx, &change)
			require.NoError(t, err)
			hooks.mu.Lock()
			hooks.target, hooks.puts = tc.target, nil
			hooks.mu.Unlock()

			_, err = newDriver().EnsureGroup(ctx, group)
			require.NoError(t, err)
			result, transition, heartbeat := describe()
			assert.Equal(t, "CONTINUE", result)
			assert.Equal(t, terminatingTransition, transition)
			assert.EqualValues(t, 120, heartbeat)
			require.Len(t, hooks.puts, 1, "put back once")
			if tc.target != "" {
				require.NotNil(t, hooks.puts[0].NotificationTargetARN, "the target is cleared")
				assert.Empty(t, *hooks.puts[0].NotificationTargetARN)
			} else {
				assert.Nil(t, hooks.puts[0].NotificationTargetARN, "a hook with no target is put with none")
			}
		})
	}

	hooks.mu.Lock()
	hooks.puts = nil
	hooks.mu.Unlock()
	_, err = newDriver().EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Empty(t, hooks.puts, "a hook as nodeset put it is left as it is")
}
