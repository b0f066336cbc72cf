package eksasg

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

// TestAHookThatCannotBeReadLeavesTheHeartbeatTimeoutUnknown: a lifecycle
// action read through a queue's class, whose group's hook cannot be looked
// up, has no heartbeat timeout of that class: the queue's class may be
// another than the group's. The timeout of the Node's own class is given
// by LifecycleHeartbeatTimeout.
func TestAHookThatCannotBeReadLeavesTheHeartbeatTimeoutUnknown(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "unread-interruptions")
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second,
		Queues: func(context.Context, string, map[string][]byte) (Queues, error) { return q.SQS, nil }})
	patient, eager := w.class(), w.class()
	patient.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Hour}}
	eager.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Minute}}

	// No such group (no hook to read) at moto.
	q.Put(t, framework.TerminateLifecycleAction(region, "nodeset-prod-unknown", HookName, "i-0eee", "tok", time.Now()))
	var got []drivers.Interruption
	for end := time.Now().Add(30 * time.Second); len(got) == 0 && time.Now().Before(end); {
		batch, err := d.ReceiveInterruptions(ctx, patient)
		require.NoError(t, err)
		got = batch
	}
	require.Len(t, got, 1)
	require.NotNil(t, got[0].Lifecycle)
	assert.Zero(t, got[0].Lifecycle.HeartbeatTimeout, "not the hour of the class the queue was read with")
	assert.Equal(t, time.Minute, d.LifecycleHeartbeatTimeout(eager, got[0].Lifecycle.HeartbeatTimeout), "the Node's class gives it")
	assert.Equal(t, 2*time.Minute, d.LifecycleHeartbeatTimeout(eager, 2*time.Minute), "a timeout read from the hook stays")
}
