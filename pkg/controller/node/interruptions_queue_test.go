package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// brokenQueue is an interruption source whose queue answers every receive
// or every delete with an error, as SQS does for a deleted queue or
// revoked permissions.
type brokenQueue struct {
	*recordingSource
	receiveErr, ackErr error
}

func (brokenQueue) InterruptionQueue(class drivers.Class) string {
	return "https://sqs.eu-west-1.amazonaws.com/111122223333/" + class.Spec.Simulated.InstanceType
}

func (q brokenQueue) ReceiveInterruptions(context.Context, drivers.Class) ([]drivers.Interruption, error) {
	if q.receiveErr != nil {
		return nil, q.receiveErr
	}
	return []drivers.Interruption{{Receipt: "r-1", ID: "m-1", Kind: drivers.InterruptionSpot, MachineIDs: []string{"i-0none"}, Notice: testNow}}, nil
}

func (q brokenQueue) AckInterruptions(context.Context, drivers.Class, []string) error {
	return q.ackErr
}

// objectEvents records the events of each object by name.
type objectEvents struct {
	mu     sync.Mutex
	byName map[string][]string
}

func (r *objectEvents) Event(obj runtime.Object, eventtype, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if o, ok := obj.(interface{ GetName() string }); ok {
		name = o.GetName()
	}
	r.byName[name] = append(r.byName[name], eventtype+" "+reason+" "+message)
}

func (r *objectEvents) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *objectEvents) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *objectEvents) of(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

// TestAFailingInterruptionQueueIsToldOnItsClasses: a queue that was
// deleted, or whose permissions were revoked, stops every drain ahead of
// AWS. Each class that names it says so in a Warning Event (the reason
// from AWS, scrubbed), instead of a log line alone; a class of another
// queue is not told.
func TestAFailingInterruptionQueueIsToldOnItsClasses(t *testing.T) {
	classOf := func(name, queue string) *nodesetv1alpha1.NodeClass {
		class := testClass(name)
		class.Spec.Driver = nodesetv1alpha1.DriverEKSASG
		class.Spec.Simulated.InstanceType = queue // the queue's name, for brokenQueue
		return class
	}
	classes := []*nodesetv1alpha1.NodeClass{classOf("spot-a", "gone"), classOf("spot-b", "gone"), classOf("spot-c", "fine")}
	for _, tc := range []struct {
		name          string
		queue         brokenQueue
		wantInMessage string
	}{
		{name: "deleted queue", queue: brokenQueue{receiveErr: errors.New("receiving from https://sqs.eu-west-1.amazonaws.com/111122223333/gone: api error QueueDoesNotExist: The specified queue does not exist or you do not have access to it.")},
			wantInMessage: "QueueDoesNotExist"},
		{name: "delete permission revoked", queue: brokenQueue{ackErr: errors.New("deleting messages from https://sqs.eu-west-1.amazonaws.com/111122223333/gone: api error AccessDenied: not authorized to perform sqs:DeleteMessage")},
			wantInMessage: "AccessDenied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, classes)
			tc.queue.recordingSource = &recordingSource{}
			f.controller.registry[nodesetv1alpha1.DriverEKSASG] = struct {
				*recordingDriver
				brokenQueue
			}{newRecordingDriver(nodesetv1alpha1.DriverEKSASG), tc.queue}
			events := &objectEvents{byName: map[string][]string{}}
			f.controller.recorder = events
			require.Len(t, f.controller.interruptionQueues(), 2, "two queues: gone (spot-a, spot-b) and fine (spot-c)")

			f.controller.consumeOnce(context.Background(), "spot-a", nil)
			for _, name := range []string{"spot-a", "spot-b"} {
				told := events.of(name)
				require.Len(t, told, 1, "class %s names the failing queue", name)
				assert.Contains(t, told[0], "Warning "+ReasonInterruptionQueueFailed)
				assert.Contains(t, told[0], tc.wantInMessage)
				assert.Contains(t, told[0], "https://sqs.eu-west-1.amazonaws.com/111122223333/gone")
			}
			assert.Empty(t, events.of("spot-c"), "another queue's class")
		})
	}
}
