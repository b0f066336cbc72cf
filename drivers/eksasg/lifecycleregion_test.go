package eksasg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

// regionalLifecycle records the region of each lifecycle call. moto
// implements neither CompleteLifecycleAction nor
// RecordLifecycleActionHeartbeat.
type regionalLifecycle struct {
	mu        sync.Mutex
	completed []string
	beats     []string
}

func (r *regionalLifecycle) in(region string) LifecycleActions { return regionalActions{r, region} }

type regionalActions struct {
	r      *regionalLifecycle
	region string
}

func (a regionalActions) CompleteLifecycleAction(context.Context, *autoscaling.CompleteLifecycleActionInput, ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	a.r.mu.Lock()
	defer a.r.mu.Unlock()
	a.r.completed = append(a.r.completed, a.region)
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (a regionalActions) RecordLifecycleActionHeartbeat(context.Context, *autoscaling.RecordLifecycleActionHeartbeatInput, ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	a.r.mu.Lock()
	defer a.r.mu.Unlock()
	a.r.beats = append(a.r.beats, a.region)
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

// TestALifecycleActionIsCompletedInItsGroupsRegion: a class's region may
// change under a running NodeSet, and the instances of the old region's
// group are then terminated there, through its termination hook. Their
// lifecycle actions are Auto Scaling's of that region: heartbeaten or
// completed in the class's new region, they are not found (a
// ValidationError, taken for an action that is over), and the instance
// waits out the hook's whole timeout, or goes mid-drain when heartbeats
// were to keep it. The region is the one the event names; an event that
// names none AWS has leaves the class's.
func TestALifecycleActionIsCompletedInItsGroupsRegion(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "moved-interruptions")
	lifecycle := &regionalLifecycle{}
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second,
		Queues: func(context.Context, string, map[string][]byte) (Queues, error) { return q.SQS, nil },
		Lifecycle: func(_ context.Context, r string, _ map[string][]byte) (LifecycleActions, error) {
			return lifecycle.in(r), nil
		}})
	class := w.class() // moved to us-east-1; its group of before is in us-west-2
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL}
	require.NoError(t, d.Validate(ctx, class))
	name := GroupName("prod", "team-a", "moved")

	notice := time.Now().UTC().Truncate(time.Second)
	q.Send(t, framework.TerminateLifecycleAction("us-west-2", name, HookName, "i-0old", "tok-1", notice).JSON())
	q.Send(t, framework.TerminateLifecycleAction("zz-forged-1", name, HookName, "i-0new", "tok-2", notice).JSON())
	byMachine := map[string]drivers.Interruption{}
	for end := time.Now().Add(30 * time.Second); len(byMachine) < 2 && time.Now().Before(end); {
		batch, err := d.ReceiveInterruptions(ctx, class)
		require.NoError(t, err)
		for _, n := range batch {
			require.NotNil(t, n.Lifecycle, "%+v", n)
			byMachine[n.Lifecycle.MachineID] = n
		}
	}
	require.Len(t, byMachine, 2)
	assert.Equal(t, "us-west-2", byMachine["i-0old"].Lifecycle.Region)
	assert.Empty(t, byMachine["i-0new"].Lifecycle.Region, "a region AWS does not have is not the group's")

	for _, id := range []string{"i-0old", "i-0new"} {
		action := *byMachine[id].Lifecycle
		require.NoError(t, d.RecordLifecycleHeartbeat(ctx, class, action))
		require.NoError(t, d.CompleteLifecycleAction(ctx, class, action))
	}
	assert.Equal(t, []string{"us-west-2", region}, lifecycle.beats, "heartbeats where each group is")
	assert.Equal(t, []string{"us-west-2", region}, lifecycle.completed, "completions where each group is")
}
