package eksasg

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

// TestMessagesNamingRegionsMakeNoClientsThere: a lifecycle action's hook is
// looked up in the region its event names, with AWS clients made for that
// region and kept for the life of the process. Whoever may send to the
// queue writes that region: a new name in each message would make a set of
// clients per name, never let go, and a call to an API with no DNS name
// before the queue's other notices. The region of a message is used only
// when it is one AWS has.
func TestMessagesNamingRegionsMakeNoClientsThere(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "forged-regions")
	clients := awscloud.SDKClients(w.endpoint)
	var (
		mu    sync.Mutex
		asked = map[string]int{}
	)
	d := New(Options{Cluster: "prod", ReceiveWait: time.Second,
		Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
			mu.Lock()
			asked[r]++
			mu.Unlock()
			return clients(ctx, r, creds)
		},
		Queues: func(context.Context, string, map[string][]byte) (Queues, error) { return q.SQS, nil }})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL}
	require.NoError(t, d.Validate(ctx, class))

	const forged = 5
	now := time.Now().UTC().Truncate(time.Second)
	for i := range forged {
		q.Send(t, framework.TerminateLifecycleAction(fmt.Sprintf("zz-forged%c-%d", 'a'+i, i+1), "nodeset-elsewhere", HookName, "i-0eee", "tok", now).JSON())
	}
	// One from a region AWS has is still looked up there.
	q.Send(t, framework.TerminateLifecycleAction("us-west-2", "nodeset-elsewhere", HookName, "i-0fff", "tok", now).JSON())
	var got []drivers.Interruption
	for end := time.Now().Add(30 * time.Second); len(got) < forged+1 && time.Now().Before(end); {
		batch, err := d.ReceiveInterruptions(ctx, class)
		require.NoError(t, err)
		got = append(got, batch...)
	}
	require.Len(t, got, forged+1)
	for _, n := range got {
		assert.Equal(t, drivers.InterruptionTermination, n.Kind)
		require.NotNil(t, n.Lifecycle, "still a lifecycle action, timed by the class's hook")
	}
	mu.Lock()
	defer mu.Unlock()
	for r := range asked {
		assert.Contains(t, []string{region, "us-west-2"}, r, "clients made for a region only named like one")
	}
	assert.NotZero(t, asked["us-west-2"], "a region AWS has is looked in")
}
