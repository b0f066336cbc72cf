package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// specQueue is an interruption source whose classes name their queue in
// their eks-asg section, as the eks-asg driver's do. Its queue gives the
// notices set in notices once, and it records the receipts acknowledged
// and the groups whose lifecycle actions were completed.
type specQueue struct {
	*recordingSource
	notices   []drivers.Interruption
	acked     []string
	completed []string
}

func (*specQueue) InterruptionQueue(class drivers.Class) string {
	if s := class.Spec.EKSAutoscalingGroup; s != nil && s.Interruptions != nil {
		return s.Interruptions.QueueURL
	}
	return ""
}

func (q *specQueue) ReceiveInterruptions(context.Context, drivers.Class) ([]drivers.Interruption, error) {
	out := q.notices
	q.notices = nil
	return out, nil
}

func (q *specQueue) AckInterruptions(_ context.Context, _ drivers.Class, receipts []string) error {
	q.acked = append(q.acked, receipts...)
	return nil
}

func (q *specQueue) CompleteLifecycleAction(_ context.Context, _ drivers.Class, action drivers.LifecycleAction) error {
	q.completed = append(q.completed, action.Group)
	return nil
}

// asgClassOf is an eks-asg class named name, reading queueURL ("": none)
// with the credentials Secret nodeset-system/secret ("": none).
func asgClassOf(name, queueURL, secret string) *nodesetv1alpha1.NodeClass {
	class := asgTestClass()
	class.Name = name
	section := *class.Spec.EKSAutoscalingGroup
	if queueURL != "" {
		section.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: queueURL}
	}
	class.Spec.EKSAutoscalingGroup = &section
	class.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: 5 * time.Minute}}
	if secret != "" {
		class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: secret}
	}
	return class
}

// classNode is a Node of an eks-asg group's machine instance, of class.
func classNode(name, class, instance string) *corev1.Node {
	node := groupNode(name, nodesetv1alpha1.DriverEKSASG, instance)
	node.Labels[nodesetv1alpha1.LabelNodeClass] = class
	return node
}

// scopeGroups is the group driver of a newScopeFixture.
func scopeGroups(f *fixture) *recordingGroupDriver {
	return f.controller.registry[nodesetv1alpha1.DriverEKSASG].(struct {
		*recordingGroupDriver
		*specQueue
	}).recordingGroupDriver
}

// newScopeFixture is a fixture serving classes through a group driver
// whose interruption source is specQueue, with a NodeSet of each class
// whose group is <class>-group.
func newScopeFixture(t *testing.T, classes []*nodesetv1alpha1.NodeClass, objects ...runtime.Object) (*fixture, *specQueue) {
	f := newFixture(t, classes, objects...)
	queue := &specQueue{recordingSource: &recordingSource{}}
	f.controller.registry = drivers.Registry{nodesetv1alpha1.DriverEKSASG: struct {
		*recordingGroupDriver
		*specQueue
	}{newGroupDriver(), queue}}
	for _, class := range classes {
		set := &nodesetv1alpha1.NodeSet{
			ObjectMeta: metav1.ObjectMeta{Name: class.Name + "-web", Namespace: "team-a", UID: types.UID("uid-" + class.Name)},
			Spec:       nodesetv1alpha1.NodeSetSpec{NodeClassName: class.Name},
			Status:     nodesetv1alpha1.NodeSetStatus{Group: &nodesetv1alpha1.GroupStatus{Name: class.Name + "-group"}},
		}
		require.NoError(t, f.setIndexer.Add(set))
	}
	return f, queue
}

// lifecycleNotice is a lifecycle action of group for instance, which has
// no Node (drained and gone, or never made).
func lifecycleNotice(receipt, group, instance string) drivers.Interruption {
	return drivers.Interruption{Receipt: receipt, Kind: drivers.InterruptionTermination, MachineIDs: []string{instance}, Notice: testNow,
		Deadline:  testNow.Add(time.Hour),
		Lifecycle: &drivers.LifecycleAction{Group: group, Hook: "nodeset-termination", Token: "t-" + receipt, MachineID: instance, HeartbeatTimeout: time.Minute}}
}

// TestANoticeActsOnlyOnTheClassesThatReadItsQueue: whoever may send to a
// class's queue may drain the Nodes of the classes that read it, and no
// other. A spot warning on the queue of class queued, for the instance of
// a Node of class quiet (which reads no queue), leaves that Node alone:
// its machine is one of no NodeSet as far as that queue goes, whether the
// warning is counted and acknowledged at once or kept for a Node to come.
// A lifecycle action on that queue naming quiet's group is not completed:
// AWS would terminate an instance whose Node was never drained.
func TestANoticeActsOnlyOnTheClassesThatReadItsQueue(t *testing.T) {
	ctx := context.Background()
	setUp := func(t *testing.T) (*fixture, *specQueue) {
		queued := asgClassOf("queued", "https://sqs.eu-west-1.amazonaws.com/111122223333/queued", "")
		quiet := asgClassOf("quiet", "", "")
		f, queue := newScopeFixture(t, []*nodesetv1alpha1.NodeClass{queued, quiet},
			classNode("quiet-node", "quiet", "i-0quiet"), classNode("queued-node", "queued", "i-0queued"))
		require.Len(t, f.controller.interruptionQueues(), 1, "quiet reads no queue")
		return f, queue
	}
	untouched := func(t *testing.T, f *fixture) {
		t.Helper()
		node, err := f.kube.CoreV1().Nodes().Get(ctx, "quiet-node", metav1.GetOptions{})
		if assert.NoError(t, err, "a Node of a class that reads no queue is not deleted") {
			assert.Empty(t, node.Annotations[nodesetv1alpha1.AnnotationInterruption], "nor is the notice recorded on it")
		}
	}
	warning := spotWarning("i-0quiet", testNow)
	warning.Receipt = "r-quiet"
	mine := spotWarning("i-0queued", testNow)
	mine.Receipt = "r-queued"

	t.Run("a warning, acknowledged at once", func(t *testing.T) {
		f, queue := setUp(t)
		queue.notices = []drivers.Interruption{warning, mine}
		require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
		assert.True(t, f.interrupted("queued-node"), "a Node of the class that reads the queue is drained")
		untouched(t, f)
		assert.ElementsMatch(t, []string{"r-quiet", "r-queued"}, queue.acked)
		assert.Equal(t, 1.0, f.unknownNotices(), "quiet's instance is a machine of no NodeSet for that queue")
	})

	t.Run("a warning, kept for a Node to come", func(t *testing.T) {
		f, queue := setUp(t)
		early := newEarlyWarnings(maxEarlyWarnings)
		queue.notices = []drivers.Interruption{warning}
		require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", early))
		assert.Empty(t, queue.acked, "kept for a Node of a class that reads the queue, its message comes again")
		f.controller.actOnEarlyWarnings(ctx, early)
		untouched(t, f)
		assert.Equal(t, 1, early.len(), "still waiting for a Node of a class that reads the queue")
	})

	t.Run("a lifecycle action", func(t *testing.T) {
		f, queue := setUp(t)
		queue.notices = []drivers.Interruption{lifecycleNotice("r-quiet-action", "quiet-group", "i-0quietgone"),
			lifecycleNotice("r-queued-action", "queued-group", "i-0queuedgone")}
		require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "queued", nil))
		assert.Equal(t, []string{"queued-group"}, queue.completed, "only the action of the group of the class that reads the queue is completed")
		assert.ElementsMatch(t, []string{"r-quiet-action", "r-queued-action"}, queue.acked)
		assert.Equal(t, 1.0, f.unknownNotices(), "the action naming quiet's group is for a machine of no NodeSet")
	})
}

// TestANoticeActsOnEveryClassNamingItsQueue: two classes that name the
// same queue with different credentials Secrets are read by two
// consumers, and SQS gives each message to one of them. A notice received
// through either acts on the Nodes and groups of both.
func TestANoticeActsOnEveryClassNamingItsQueue(t *testing.T) {
	url := "https://sqs.eu-west-1.amazonaws.com/111122223333/shared"
	a, b := asgClassOf("a", url, "creds-a"), asgClassOf("b", url, "creds-b")
	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nodeset-system"}, Data: map[string][]byte{"key": []byte(name)}}
	}
	f, queue := newScopeFixture(t, []*nodesetv1alpha1.NodeClass{a, b},
		secret("creds-a"), secret("creds-b"), classNode("b-node", "b", "i-0b"))
	ctx := context.Background()
	require.Len(t, f.controller.interruptionQueues(), 2, "one consumer per set of credentials")

	warning := spotWarning("i-0b", testNow)
	warning.Receipt = "r-b"
	late := spotWarning("i-0late", testNow)
	late.Receipt = "r-late"
	queue.notices = []drivers.Interruption{warning, late, lifecycleNotice("r-b-action", "b-group", "i-0bgone")}
	early := newEarlyWarnings(maxEarlyWarnings)
	require.Equal(t, consumeOK, f.controller.consumeOnce(ctx, "a", early))

	assert.True(t, f.interrupted("b-node"), "read through a, the notice drains b's Node")
	assert.Equal(t, []string{"b-group"}, queue.completed, "and completes the lifecycle action of b's group")
	assert.ElementsMatch(t, []string{"r-b", "r-b-action"}, queue.acked)
	assert.Zero(t, f.unknownNotices())

	f.now = testNow.Add(30 * time.Second)
	f.appear(classNode("b-late", "b", "i-0late"))
	f.controller.actOnEarlyWarnings(ctx, early)
	assert.True(t, f.interrupted("b-late"), "a warning kept from a's consumer drains b's Node when it appears")
}

// TestALifecycleActionOfAnotherGroupIsNotRecorded: an Auto Scaling group
// never takes another's instance, so a lifecycle action that names
// another group than the Node's is no action of its machine. The Node is
// drained for the notice, but the action is not recorded on it: it is
// never completed for the group it names.
func TestALifecycleActionOfAnotherGroupIsNotRecorded(t *testing.T) {
	url := "https://sqs.eu-west-1.amazonaws.com/111122223333/shared"
	node := classNode("a-node", "a", "i-0a")
	node.Annotations[nodesetv1alpha1.AnnotationGroup] = "a-group"
	f, _ := newScopeFixture(t, []*nodesetv1alpha1.NodeClass{asgClassOf("a", url, ""), asgClassOf("b", url, "")}, node)
	ctx := context.Background()
	recorded := func() *drivers.LifecycleAction {
		t.Helper()
		for _, a := range f.kube.Actions() {
			patch, ok := a.(core.PatchAction)
			if !ok || patch.GetName() != "a-node" {
				continue
			}
			var written struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			require.NoError(t, json.Unmarshal(patch.GetPatch(), &written))
			if raw := written.Metadata.Annotations[nodesetv1alpha1.AnnotationInterruption]; raw != "" {
				var rec interruptionRecord
				require.NoError(t, json.Unmarshal([]byte(raw), &rec))
				return rec.Lifecycle
			}
		}
		t.Fatal("no interruption recorded on the Node")
		return nil
	}

	require.NoError(t, f.controller.interrupt(ctx, "q", "a-node", lifecycleNotice("r-b", "b-group", "i-0a")))
	assert.True(t, f.interrupted("a-node"), "the Node is drained for the notice")
	assert.Nil(t, recorded(), "the action of another group is not recorded")

	node = classNode("a-node", "a", "i-0a")
	node.Annotations[nodesetv1alpha1.AnnotationGroup] = "a-group"
	f, _ = newScopeFixture(t, []*nodesetv1alpha1.NodeClass{asgClassOf("a", url, ""), asgClassOf("b", url, "")}, node)
	require.NoError(t, f.controller.interrupt(ctx, "q", "a-node", lifecycleNotice("r-a", "a-group", "i-0a")))
	if action := recorded(); assert.NotNil(t, action, "the action of the Node's own group is recorded") {
		assert.Equal(t, "a-group", action.Group)
	}
}
