package eksasg

import (
	"context"
	"fmt"
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

// TestAHookChangedByHandIsPutBackWithoutARestart: the driver knows each
// group's termination hook once it put or saw it, and a steady poll costs
// no hook call. A hook deleted or changed by hand later is put back within
// hookRelook and a look per group, without a restart: one group's hook is
// looked at per look at the region, so a poll of many NodeSets costs at
// most one call more than it does without hooks.
func TestAHookChangedByHandIsPutBackWithoutARestart(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	counter := &callCounter{calls: map[string]int{}, attempts: map[string]int{}}
	now := time.Unix(1_800_000_000, 0)
	hooks := &targetedHooks{hooks: w.asg.(LifecycleHooks)}
	sdk := awscloud.NewSDKClients(awscloud.SDKConfig{Endpoint: w.endpoint, Observe: counter.observe})
	d := New(Options{Cluster: "prod", PollInterval: time.Minute, Now: func() time.Time { return now },
		Clients: func(ctx context.Context, region string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
			asg, ec2c, err := sdk(ctx, region, creds)
			if err != nil {
				return nil, nil, err
			}
			hooks.mu.Lock()
			hooks.AutoScaling, hooks.hooks = asg, asg.(LifecycleHooks)
			hooks.mu.Unlock()
			return hooks, ec2c, nil
		}})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{
		QueueURL: "https://sqs." + region + ".amazonaws.com/111122223333/nodeset-interruptions", HeartbeatTimeout: &metav1.Duration{Duration: 2 * time.Minute}}
	const sets = 4
	group := func(i int) drivers.Group {
		name := fmt.Sprintf("set-%d", i)
		return drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name},
			Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	}
	for i := range sets {
		_, err := d.EnsureGroup(ctx, group(i))
		require.NoError(t, err)
	}
	hookOf := func(i int) (result string, heartbeat int32, ok bool) {
		t.Helper()
		out, err := w.asg.(LifecycleHooks).DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group(i).Name)})
		require.NoError(t, err)
		for _, h := range out.LifecycleHooks {
			if aws.ToString(h.LifecycleHookName) == HookName {
				return aws.ToString(h.DefaultResult), aws.ToInt32(h.HeartbeatTimeout), true
			}
		}
		return "", 0, false
	}
	for i := range sets {
		_, heartbeat, ok := hookOf(i)
		require.True(t, ok, "set-%d has the hook", i)
		require.EqualValues(t, 120, heartbeat)
	}

	// By hand: set-0's hook deleted, set-2's changed.
	_, err := w.asg.(LifecycleHooks).DeleteLifecycleHook(ctx, &autoscaling.DeleteLifecycleHookInput{
		AutoScalingGroupName: aws.String(group(0).Name), LifecycleHookName: aws.String(HookName)})
	require.NoError(t, err)
	_, err = w.asg.(LifecycleHooks).PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(group(2).Name), LifecycleHookName: aws.String(HookName),
		LifecycleTransition: aws.String(terminatingTransition), HeartbeatTimeout: aws.Int32(30), DefaultResult: aws.String("ABANDON")})
	require.NoError(t, err)

	poll := func() map[string]int {
		now = now.Add(2 * time.Minute) // the last look is stale
		counter.take()
		for i := range sets {
			_, err := d.EnsureGroup(ctx, group(i))
			require.NoError(t, err)
		}
		return counter.take()
	}
	// Within hookRelook of the hooks' last look, a poll costs no hook call.
	for now.Add(2*time.Minute).Sub(time.Unix(1_800_000_000, 0)) < hookRelook {
		calls := poll()
		assert.Equal(t, map[string]int{"DescribeAutoScalingGroups success": 1, "DescribeInstances success": 1}, calls)
	}
	_, _, ok := hookOf(0)
	require.False(t, ok, "not looked at yet")

	// Past it, one hook per poll is looked at, until each was.
	for range sets {
		calls := poll()
		assert.Equal(t, 1, calls["DescribeAutoScalingGroups success"], "%v", calls)
		assert.Equal(t, 1, calls["DescribeInstances success"], "%v", calls)
		assert.Equal(t, 1, calls["DescribeLifecycleHooks success"], "one hook per look: %v", calls)
		assert.LessOrEqual(t, len(calls), 4, "nothing else but the put of a hook changed: %v", calls)
	}
	for _, i := range []int{0, 2} {
		result, heartbeat, ok := hookOf(i)
		require.True(t, ok, "set-%d's hook is put back", i)
		assert.Equal(t, "CONTINUE", result, "set-%d", i)
		assert.EqualValues(t, 120, heartbeat, "set-%d", i)
	}
	// Each was looked at: the next poll costs no hook call again.
	calls := poll()
	assert.Equal(t, map[string]int{"DescribeAutoScalingGroups success": 1, "DescribeInstances success": 1}, calls)
}

// TestALifecycleActionReadsAHookLookedAtLongAgoAgain: a lifecycle action
// is heartbeaten by its hook's timeout. The one the driver put or saw is
// used for hookRelook; after that the hook is described again, so a
// timeout changed by hand is not heartbeaten by the old one until the
// group's next look puts it back.
func TestALifecycleActionReadsAHookLookedAtLongAgoAgain(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	now := time.Unix(1_800_000_000, 0)
	hooks := &targetedHooks{hooks: w.asg.(LifecycleHooks)}
	sdk := awscloud.SDKClients(w.endpoint)
	d := New(Options{Cluster: "prod", Now: func() time.Time { return now },
		Clients: func(ctx context.Context, region string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
			asg, ec2c, err := sdk(ctx, region, creds)
			if err != nil {
				return nil, nil, err
			}
			hooks.mu.Lock()
			hooks.AutoScaling = asg
			hooks.mu.Unlock()
			return hooks, ec2c, nil
		}})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{
		QueueURL: "https://sqs." + region + ".amazonaws.com/111122223333/nodeset-interruptions", HeartbeatTimeout: &metav1.Duration{Duration: 2 * time.Minute}}
	group := drivers.Group{Name: GroupName("prod", "team-a", "beats"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "beats"},
		Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	_, err = w.asg.(LifecycleHooks).PutLifecycleHook(ctx, &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String(group.Name), LifecycleHookName: aws.String(HookName),
		LifecycleTransition: aws.String(terminatingTransition), HeartbeatTimeout: aws.Int32(600), DefaultResult: aws.String(hookDefaultResult)})
	require.NoError(t, err)

	assert.Equal(t, 2*time.Minute, d.groupHeartbeatTimeout(ctx, class, region, group.Name), "as put, within hookRelook")
	now = now.Add(hookRelook)
	assert.Equal(t, 10*time.Minute, d.groupHeartbeatTimeout(ctx, class, region, group.Name), "described again")
}
