package eksasg

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	"nodeset.dev/nodeset/test/framework"
)

func TestParseEvent(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	start := at.Add(14 * 24 * time.Hour)
	topic := "arn:aws:sns:" + region + ":123456789012:interruptions"
	for _, tc := range []struct {
		name      string
		body      string
		kind      drivers.InterruptionKind
		machines  []string
		deadline  time.Time
		lifecycle *drivers.LifecycleAction
	}{
		{name: "spot warning", body: framework.SpotInterruptionWarning(region, "i-0aaa", at).JSON(),
			kind: drivers.InterruptionSpot, machines: []string{"i-0aaa"}, deadline: at.Add(2 * time.Minute)},
		{name: "rebalance recommendation", body: framework.RebalanceRecommendation(region, "i-0bbb", at).JSON(),
			kind: drivers.InterruptionRebalance, machines: []string{"i-0bbb"}},
		{name: "stopping", body: framework.InstanceStateChange(region, "i-0ccc", "stopping", at).JSON(),
			kind: drivers.InterruptionStateChange, machines: []string{"i-0ccc"}, deadline: at},
		{name: "running is nothing to do", body: framework.InstanceStateChange(region, "i-0ccc", "running", at).JSON(),
			kind: drivers.InterruptionStateChange, deadline: at},
		{name: "scheduled retirement", body: framework.ScheduledInstanceRetirement(region, "i-0ddd", at, start).JSON(),
			kind: drivers.InterruptionScheduled, machines: []string{"i-0ddd"}, deadline: start},
		{name: "lifecycle action of our hook", body: framework.TerminateLifecycleAction(region, "g", HookName, "i-0eee", "tok", at).JSON(),
			kind: drivers.InterruptionTermination, machines: []string{"i-0eee"}, deadline: at.Add(15 * time.Minute),
			lifecycle: &drivers.LifecycleAction{Group: "g", Hook: HookName, Token: "tok", MachineID: "i-0eee"}},
		{name: "lifecycle action of another hook drains but is not ours to complete",
			body: framework.TerminateLifecycleAction(region, "g", "someone-else", "i-0eee", "tok", at).JSON(),
			kind: drivers.InterruptionTermination, machines: []string{"i-0eee"}, deadline: at.Add(15 * time.Minute)},
		// As AWS documents them (EC2, Auto Scaling and AWS Health user guides).
		{name: "spot warning as EC2 sends it", body: `{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-23T12:00:00Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","instance-action":"terminate"}}`,
			kind: drivers.InterruptionSpot, machines: []string{"i-1234567890abcdef0"}, deadline: at.Add(2 * time.Minute)},
		{name: "state change as EC2 sends it", body: `{"id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2026-11-23T12:00:00Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],"detail":{"instance-id":"i-abcd1111","state":"shutting-down"}}`,
			kind: drivers.InterruptionStateChange, machines: []string{"i-abcd1111"}, deadline: at},
		{name: "lifecycle action as Auto Scaling sends it", body: `{"version":"0","id":"468fa2ff-4c2c-5d4b-9dc6-ef3f8e4d3f57","detail-type":"EC2 Instance-terminate Lifecycle Action","source":"aws.autoscaling","account":"123456789012","time":"2026-11-23T12:00:00Z","region":"us-west-2","resources":["arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:042cba90-ad2f-431c-9b4d-6d9055bcc9fb:autoScalingGroupName/my-asg"],"detail":{"LifecycleActionToken":"87654321-4321-4321-4321-210987654321","AutoScalingGroupName":"my-asg","LifecycleHookName":"nodeset-termination","EC2InstanceId":"i-1234567890abcdef0","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","NotificationMetadata":"additional-info","Origin":"AutoScalingGroup","Destination":"EC2"}}`,
			kind: drivers.InterruptionTermination, machines: []string{"i-1234567890abcdef0"}, deadline: at.Add(15 * time.Minute),
			lifecycle: &drivers.LifecycleAction{Group: "my-asg", Hook: HookName, Token: "87654321-4321-4321-4321-210987654321", MachineID: "i-1234567890abcdef0"}},
		{name: "scheduled change as AWS Health sends it", body: `{"version":"0","id":"7fb65329-1628-4cf3-a740-95fg457h1402","detail-type":"AWS Health Event","source":"aws.health","account":"123456789012","time":"2026-11-23T12:00:00Z","region":"us-east-1","resources":["i-12345678"],"detail":{"eventArn":"arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED/AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED_1","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED","eventTypeCategory":"scheduledChange","eventScopeCode":"ACCOUNT_SPECIFIC","startTime":"Mon, 07 Dec 2026 12:00:00 GMT","endTime":"Mon, 07 Dec 2026 14:00:00 GMT","statusCode":"upcoming","eventRegion":"us-east-1","eventDescription":[{"language":"en_US","latestDescription":"Reboot maintenance."}],"affectedEntities":[{"entityValue":"i-12345678","tags":{"stage":"prod"}},{"entityValue":"i-87654321"}]}}`,
			kind: drivers.InterruptionScheduled, machines: []string{"i-12345678", "i-87654321"}, deadline: start},
		{name: "time with fractional seconds and an offset", body: `{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-23T13:00:00.000+01:00","region":"us-east-2","resources":[],"detail":{"instance-id":"i-0aaa","instance-action":"stop"}}`,
			kind: drivers.InterruptionSpot, machines: []string{"i-0aaa"}, deadline: at.Add(2 * time.Minute)},
		{name: "a closed scheduled change announces nothing", body: closedScheduledChange(at, start),
			kind: drivers.InterruptionScheduled, deadline: start},
		// EventBridge -> SNS -> SQS: the event is the Message of SNS's envelope.
		{name: "spot warning through SNS", body: framework.SpotInterruptionWarning(region, "i-0aaa", at).SNSNotification(topic),
			kind: drivers.InterruptionSpot, machines: []string{"i-0aaa"}, deadline: at.Add(2 * time.Minute)},
		{name: "lifecycle action through SNS", body: framework.TerminateLifecycleAction(region, "g", HookName, "i-0eee", "tok", at).SNSNotification(topic),
			kind: drivers.InterruptionTermination, machines: []string{"i-0eee"}, deadline: at.Add(15 * time.Minute),
			lifecycle: &drivers.LifecycleAction{Group: "g", Hook: HookName, Token: "tok", MachineID: "i-0eee"}},
		{name: "SNS subscription confirmation", body: `{"Type":"SubscriptionConfirmation","MessageId":"m","Token":"t","TopicArn":"` + topic + `","Message":"You have chosen to subscribe to the topic.","SubscribeURL":"https://sns.example/","Timestamp":"2026-11-23T12:00:00.000Z"}`,
			kind: drivers.InterruptionUnparseable},
		{name: "SNS notification of something else", body: `{"Type":"Notification","MessageId":"m","TopicArn":"` + topic + `","Message":"hello","Timestamp":"2026-11-23T12:00:00.000Z"}`,
			kind: drivers.InterruptionUnparseable},
		// Auto Scaling's own notifications, to a hook's notification target
		// (as aws-node-termination-handler reads them too): the test
		// notification sent when the target is set is nothing to do, and
		// no unreadable message; a termination's lifecycle action is read
		// as the EventBridge event, directly or through SNS.
		{name: "Auto Scaling test notification", body: `{"AccountId":"123456789012","RequestId":"r","AutoScalingGroupARN":"arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:042cba90:autoScalingGroupName/my-asg","AutoScalingGroupName":"my-asg","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2026-11-23T12:00:00.063Z"}`,
			kind: drivers.InterruptionTermination},
		{name: "Auto Scaling test notification through SNS", body: snsOf(`{"AccountId":"123456789012","RequestId":"r","AutoScalingGroupARN":"arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:042cba90:autoScalingGroupName/my-asg","AutoScalingGroupName":"my-asg","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2026-11-23T12:00:00.063Z"}`),
			kind: drivers.InterruptionTermination},
		{name: "lifecycle action sent by Auto Scaling to the hook's target", body: directLifecycleAction,
			kind: drivers.InterruptionTermination, machines: []string{"i-1234567890abcdef0"}, deadline: at.Add(15*time.Minute + 63*time.Millisecond),
			lifecycle: &drivers.LifecycleAction{Group: "my-asg", Hook: HookName, Token: "87654321-4321-4321-4321-210987654321", MachineID: "i-1234567890abcdef0"}},
		{name: "lifecycle action sent by Auto Scaling to the hook's SNS topic", body: snsOf(directLifecycleAction),
			kind: drivers.InterruptionTermination, machines: []string{"i-1234567890abcdef0"}, deadline: at.Add(15*time.Minute + 63*time.Millisecond),
			lifecycle: &drivers.LifecycleAction{Group: "my-asg", Hook: HookName, Token: "87654321-4321-4321-4321-210987654321", MachineID: "i-1234567890abcdef0"}},
		{name: "launch lifecycle action sent by Auto Scaling", body: strings.Replace(directLifecycleAction, "EC2_INSTANCE_TERMINATING", "EC2_INSTANCE_LAUNCHING", 1),
			kind: drivers.InterruptionTermination},
		{name: "an Auto Scaling notification of neither kind", body: `{"Service":"AWS Auto Scaling","Event":"autoscaling:EC2_INSTANCE_TERMINATE","AutoScalingGroupName":"my-asg","EC2InstanceId":"i-1234567890abcdef0","Time":"2026-11-23T12:00:00.063Z"}`,
			kind: drivers.InterruptionUnparseable},
		{name: "Auto Scaling's form with another time", body: strings.Replace(directLifecycleAction, "2026-11-23T12:00:00.063Z", "noon", 1),
			kind: drivers.InterruptionUnparseable},
		{name: "an EC2 detail-type from another source", body: `{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"my.app","account":"123456789012","time":"2026-11-23T12:00:00Z","region":"us-east-2","resources":[],"detail":{"instance-id":"i-0aaa","instance-action":"terminate"}}`,
			kind: drivers.InterruptionUnparseable},
		{name: "not JSON", body: "{spot", kind: drivers.InterruptionUnparseable},
		{name: "no envelope", body: `{"Event":"autoscaling:TEST_NOTIFICATION"}`, kind: drivers.InterruptionUnparseable},
		{name: "unknown detail-type", body: `{"id":"x","detail-type":"EC2 AMI State Change","source":"aws.ec2","time":"2026-11-23T12:00:00Z","detail":{}}`,
			kind: drivers.InterruptionUnparseable},
		{name: "no instance", body: `{"id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"2026-11-23T12:00:00Z","detail":{}}`,
			kind: drivers.InterruptionUnparseable},
		{name: "bad time", body: `{"id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"noon","detail":{"instance-id":"i-1"}}`,
			kind: drivers.InterruptionUnparseable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := ParseEvent([]byte(tc.body), 15*time.Minute)
			assert.Equal(t, tc.kind, n.Kind, n.Detail)
			assert.Equal(t, tc.machines, n.MachineIDs)
			if tc.kind != drivers.InterruptionUnparseable {
				assert.True(t, tc.deadline.Equal(n.Deadline), "deadline %s, want %s", n.Deadline, tc.deadline)
				assert.Equal(t, tc.lifecycle, n.Lifecycle)
			} else {
				assert.NotEmpty(t, n.Detail, "says why")
			}
		})
	}
}

// directLifecycleAction is a termination's lifecycle action as Auto
// Scaling sends it to the hook's own notification target, without
// EventBridge's envelope (its time 63 ms after the table's at).
const directLifecycleAction = `{"Origin":"AutoScalingGroup","LifecycleHookName":"nodeset-termination","Destination":"EC2","AccountId":"123456789012","RequestId":"4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","AutoScalingGroupName":"my-asg","Service":"AWS Auto Scaling","Time":"2026-11-23T12:00:00.063Z","EC2InstanceId":"i-1234567890abcdef0","LifecycleActionToken":"87654321-4321-4321-4321-210987654321"}`

// snsOf is message in SNS's envelope, as a queue subscribed to a topic
// receives what is published to it.
func snsOf(message string) string {
	raw, err := json.Marshal(map[string]string{"Type": "Notification", "MessageId": "m", "TopicArn": "arn:aws:sns:us-west-2:123456789012:asg", "Message": message,
		"Timestamp": "2026-11-23T12:00:00.100Z"})
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// closedScheduledChange is the update AWS Health sends when a scheduled
// change is over (done, or cancelled).
func closedScheduledChange(at, start time.Time) string {
	e := framework.ScheduledInstanceRetirement(region, "i-0ddd", at, start)
	e.Detail.(map[string]any)["statusCode"] = "closed"
	return e.JSON()
}

func TestValidateInterruptionsNamesTheField(t *testing.T) {
	d := New(Options{Cluster: "prod"})
	for _, tc := range []struct {
		name  string
		in    nodesetv1alpha1.EKSInterruptions
		field string
	}{
		{"queue URL", nodesetv1alpha1.EKSInterruptions{QueueURL: "https://sqs.eu-west-1.amazonaws.com"}, "interruptions.queueURL"},
		{"heartbeat", nodesetv1alpha1.EKSInterruptions{QueueURL: "https://q.example/1/q", HeartbeatTimeout: &metav1.Duration{Duration: 10 * time.Second}}, "interruptions.heartbeatTimeout"},
		{"max drain beyond 100 heartbeats", nodesetv1alpha1.EKSInterruptions{QueueURL: "https://q.example/1/q",
			HeartbeatTimeout: &metav1.Duration{Duration: time.Minute}, MaxDrainTime: &metav1.Duration{Duration: 2 * time.Hour}}, "interruptions.maxDrainTime"},
		{"rebalance", nodesetv1alpha1.EKSInterruptions{QueueURL: "https://q.example/1/q", Rebalance: "Ignore"}, "interruptions.rebalance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := (&world{image: "ami-0123456789abcdef0", subnet: "subnet-0123abcd"}).class()
			in := tc.in
			class.Spec.EKSAutoscalingGroup.Interruptions = &in
			err := d.Validate(context.Background(), class)
			require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			assert.Contains(t, err.Error(), "spec.eksAutoscalingGroup."+tc.field)
		})
	}
}

// recordingLifecycle stands in for CompleteLifecycleAction and
// RecordLifecycleActionHeartbeat, which moto does not implement.
type recordingLifecycle struct {
	mu        sync.Mutex
	completed []autoscaling.CompleteLifecycleActionInput
	beats     int
}

func (r *recordingLifecycle) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.completed = append(r.completed, *in)
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (r *recordingLifecycle) RecordLifecycleActionHeartbeat(context.Context, *autoscaling.RecordLifecycleActionHeartbeatInput, ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beats++
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

func TestInterruptionsThroughEventBridgeAndSQS(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "nodeset-interruptions")
	queueURL, queues := q.URL, q.SQS
	lifecycle := &recordingLifecycle{}
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second,
		Queues:    func(ctx context.Context, region string, creds map[string][]byte) (Queues, error) { return queues, nil },
		Lifecycle: func(context.Context, string, map[string][]byte) (LifecycleActions, error) { return lifecycle, nil },
	})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: queueURL,
		HeartbeatTimeout: &metav1.Duration{Duration: 2 * time.Minute}}
	require.NoError(t, d.Validate(ctx, class))
	assert.Equal(t, queueURL, d.InterruptionQueue(class))
	name := GroupName("prod", "team-a", "spot")
	group := drivers.Group{Name: name, Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "spot"}, Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)

	hooks, err := w.asg.(LifecycleHooks).DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(name)})
	require.NoError(t, err)
	require.Len(t, hooks.LifecycleHooks, 1, "the termination hook is on the group")
	assert.Equal(t, HookName, aws.ToString(hooks.LifecycleHooks[0].LifecycleHookName))
	assert.Equal(t, "autoscaling:EC2_INSTANCE_TERMINATING", aws.ToString(hooks.LifecycleHooks[0].LifecycleTransition))
	assert.EqualValues(t, 120, aws.ToInt32(hooks.LifecycleHooks[0].HeartbeatTimeout))
	assert.Equal(t, "CONTINUE", aws.ToString(hooks.LifecycleHooks[0].DefaultResult))

	require.Len(t, status.Machines, 1)
	instance, err := awscloud.InstanceID(status.Machines[0].ProviderID)
	require.NoError(t, err)
	q.Put(t, framework.SpotInterruptionWarning(region, instance, time.Now()))
	q.Send(t, "not an event")

	var got []drivers.Interruption
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		batch, err := d.ReceiveInterruptions(ctx, class)
		require.NoError(t, err)
		got = append(got, batch...)
	}
	require.Len(t, got, 2, "the event EventBridge delivered and the stray message")
	kinds := map[drivers.InterruptionKind]drivers.Interruption{}
	for _, n := range got {
		kinds[n.Kind] = n
	}
	spot := kinds[drivers.InterruptionSpot]
	assert.Equal(t, []string{instance}, spot.MachineIDs)
	assert.WithinDuration(t, spot.Notice.Add(2*time.Minute), spot.Deadline, 0)
	assert.Contains(t, kinds, drivers.InterruptionUnparseable)
	require.NoError(t, d.AckInterruptions(ctx, class, []string{got[0].Receipt, got[1].Receipt}))
	require.NoError(t, d.AckInterruptions(ctx, class, []string{got[0].Receipt}), "a receipt acknowledged twice is no error")
	batch, err := d.ReceiveInterruptions(ctx, class)
	require.NoError(t, err)
	assert.Empty(t, batch, "acknowledged messages do not come again")

	action := drivers.LifecycleAction{Group: name, Hook: HookName, Token: "tok-1", MachineID: instance}
	require.NoError(t, d.RecordLifecycleHeartbeat(ctx, class, action))
	require.NoError(t, d.CompleteLifecycleAction(ctx, class, action))
	require.Len(t, lifecycle.completed, 1)
	assert.Equal(t, "CONTINUE", aws.ToString(lifecycle.completed[0].LifecycleActionResult))
	assert.Equal(t, "tok-1", aws.ToString(lifecycle.completed[0].LifecycleActionToken))
	assert.Equal(t, 1, lifecycle.beats)

	// The class stops handling interruptions: the hook goes.
	class.Spec.EKSAutoscalingGroup.Interruptions = nil
	group.Class = class
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	hooks, err = w.asg.(LifecycleHooks).DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(name)})
	require.NoError(t, err)
	assert.Empty(t, hooks.LifecycleHooks, fmt.Sprintf("%+v", hooks.LifecycleHooks))
}

// One queue may serve classes whose hooks have different heartbeat
// timeouts; the consumer reads it through one of them. A lifecycle action
// must be kept waiting by its own group's hook, or Auto Scaling lets the
// instance go while its Node still drains.
func TestLifecycleActionIsTimedByItsGroupsHook(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "shared-interruptions")
	newDriver := func() *Driver {
		return New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second,
			Queues: func(context.Context, string, map[string][]byte) (Queues, error) { return q.SQS, nil }})
	}
	// The queue's consumer reads it through "patient"; the instance is of
	// a group of "eager".
	patient, eager := w.class(), w.class()
	patient.Name, eager.Name = "patient", "eager"
	patient.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Hour}, MaxDrainTime: &metav1.Duration{Duration: 48 * time.Hour}}
	eager.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Minute}}
	for _, class := range []drivers.Class{patient, eager} {
		require.NoError(t, newDriver().Validate(ctx, class))
	}
	d := newDriver()
	name := GroupName("prod", "team-b", "eager")
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: name, Owner: drivers.Owner{Cluster: "prod", Namespace: "team-b", Name: "eager"},
		Class: eager, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"})
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		driver *Driver
	}{{"the driver that put the hook", d}, {"a restarted driver", newDriver()}} {
		t.Run(tc.name, func(t *testing.T) {
			notice := time.Now().UTC().Truncate(time.Second)
			q.Put(t, framework.TerminateLifecycleAction(region, name, HookName, "i-0eee", "tok", notice))
			var got []drivers.Interruption
			for end := time.Now().Add(30 * time.Second); len(got) == 0 && time.Now().Before(end); {
				got, err = tc.driver.ReceiveInterruptions(ctx, patient)
				require.NoError(t, err)
			}
			require.Len(t, got, 1)
			require.NotNil(t, got[0].Lifecycle)
			assert.Equal(t, time.Minute, got[0].Lifecycle.HeartbeatTimeout, "the heartbeat timeout of the group's own hook")
			assert.False(t, got[0].Deadline.After(got[0].Notice.Add(100*time.Minute)),
				"deadline %s: Auto Scaling keeps the instance at most 100 heartbeat timeouts of its hook", got[0].Deadline.Sub(got[0].Notice))
			require.NoError(t, tc.driver.AckInterruptions(ctx, patient, []string{got[0].Receipt}))
		})
	}
}

// TestLifecycleDeadlineIsTheClasssDrainTime: the deadline of a lifecycle
// action is the class's maxDrainTime (else its drain timeout, else 10
// minutes), within 100 heartbeat timeouts of the hook.
func TestLifecycleDeadlineIsTheClasssDrainTime(t *testing.T) {
	d := New(Options{Cluster: "prod"})
	notice := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	class := func(drain, maxDrain time.Duration) drivers.Class {
		c := drivers.Class{Name: "c", Spec: nodesetv1alpha1.NodeClassSpec{DriverSections: nodesetv1alpha1.DriverSections{
			EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{Interruptions: &nodesetv1alpha1.EKSInterruptions{}}}}}
		if drain > 0 {
			c.Spec.Drain = &nodesetv1alpha1.DrainPolicy{Timeout: &metav1.Duration{Duration: drain}}
		}
		if maxDrain > 0 {
			c.Spec.EKSAutoscalingGroup.Interruptions.MaxDrainTime = &metav1.Duration{Duration: maxDrain}
		}
		return c
	}
	assert.Equal(t, notice.Add(10*time.Minute), d.LifecycleDeadline(class(0, 0), notice, time.Hour))
	assert.Equal(t, notice.Add(20*time.Minute), d.LifecycleDeadline(class(20*time.Minute, 0), notice, time.Hour))
	assert.Equal(t, notice.Add(3*time.Hour), d.LifecycleDeadline(class(20*time.Minute, 3*time.Hour), notice, time.Hour))
	assert.Equal(t, notice.Add(100*time.Minute), d.LifecycleDeadline(class(0, 3*time.Hour), notice, time.Minute), "100 heartbeats")
	assert.Equal(t, notice.Add(48*time.Hour), d.LifecycleDeadline(class(0, 72*time.Hour), notice, 2*time.Hour), "48 hours at most")
	assert.Equal(t, notice.Add(3*time.Hour), d.LifecycleDeadline(class(0, 3*time.Hour), notice, 0), "the class's heartbeat when the hook's is unknown")
}

// Many clusters route EventBridge to an SNS topic and subscribe the queue
// to it: each message is then SNS's envelope with the event in Message. A
// lifecycle action in it is still timed by its own group's hook, in the
// region the event names, not the region of the class the queue is read
// through.
func TestInterruptionsThroughSNS(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "sns-interruptions")
	topic := "arn:aws:sns:" + region + ":123456789012:interruptions"
	newDriver := func() *Driver {
		return New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second,
			Queues: func(context.Context, string, map[string][]byte) (Queues, error) { return q.SQS, nil }})
	}
	// The queue is read through "reader", of another region; the instance
	// is of a group of "eager".
	reader, eager := w.class(), w.class()
	reader.Name, eager.Name = "reader", "eager"
	reader.Spec.EKSAutoscalingGroup.Region = "eu-central-1"
	reader.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Hour}, MaxDrainTime: &metav1.Duration{Duration: 48 * time.Hour}}
	eager.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL,
		HeartbeatTimeout: &metav1.Duration{Duration: time.Minute}}
	name := GroupName("prod", "team-c", "eager")
	_, err := newDriver().EnsureGroup(ctx, drivers.Group{Name: name, Owner: drivers.Owner{Cluster: "prod", Namespace: "team-c", Name: "eager"},
		Class: eager, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"})
	require.NoError(t, err)

	notice := time.Now().UTC().Truncate(time.Second)
	q.Send(t, framework.TerminateLifecycleAction(region, name, HookName, "i-0eee", "tok", notice).SNSNotification(topic))
	q.Send(t, framework.SpotInterruptionWarning(region, "i-0aaa", notice).SNSNotification(topic))
	d := newDriver()
	var got []drivers.Interruption
	for end := time.Now().Add(30 * time.Second); len(got) < 2 && time.Now().Before(end); {
		batch, err := d.ReceiveInterruptions(ctx, reader)
		require.NoError(t, err)
		got = append(got, batch...)
	}
	require.Len(t, got, 2)
	kinds := map[drivers.InterruptionKind]drivers.Interruption{}
	for _, n := range got {
		kinds[n.Kind] = n
	}
	spot := kinds[drivers.InterruptionSpot]
	assert.Equal(t, []string{"i-0aaa"}, spot.MachineIDs)
	assert.Equal(t, notice.Add(2*time.Minute), spot.Deadline.UTC())
	action := kinds[drivers.InterruptionTermination]
	require.NotNil(t, action.Lifecycle, "%+v", got)
	assert.Equal(t, drivers.LifecycleAction{Group: name, Hook: HookName, Token: "tok", MachineID: "i-0eee", Region: region, HeartbeatTimeout: time.Minute}, *action.Lifecycle,
		"the heartbeat timeout of the group's own hook, looked up in the event's region")
	require.NoError(t, d.AckInterruptions(ctx, reader, []string{got[0].Receipt, got[1].Receipt}))
	assert.Zero(t, q.Depth(t), "both messages are acknowledged")
}

// TestHealthTimesWithOneDigitDays: an AWS Health startTime is an RFC 1123
// date; one whose day is written with one digit is read too, rather than
// left unread, which would cut the drain at the notice.
func TestHealthTimesWithOneDigitDays(t *testing.T) {
	want := time.Date(2022, 6, 5, 10, 0, 0, 0, time.UTC)
	for _, text := range []string{"Sun, 05 Jun 2022 10:00:00 GMT", "Sun, 5 Jun 2022 10:00:00 GMT", "Sun, 5 Jun 2022 10:00:00 +0000", "2022-06-05T10:00:00Z"} {
		got, ok := healthTime(text)
		require.True(t, ok, text)
		assert.True(t, want.Equal(got), "%s: %s", text, got)
	}
}

// TestANoticeComesAgainWithItsFirstDeliveryTime: a notice not acknowledged
// comes again after the visibility timeout, possibly to another replica,
// with the time SQS first delivered it (ApproximateFirstReceiveTimestamp):
// a warning kept for a Node to come is kept from then, not from each
// delivery.
func TestANoticeComesAgainWithItsFirstDeliveryTime(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "nodeset-again")
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second, VisibilityTimeout: time.Second,
		Queues: func(ctx context.Context, region string, creds map[string][]byte) (Queues, error) { return q.SQS, nil }})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL}
	before := time.Now().Add(-time.Second) // SQS's clock, to the millisecond
	q.Put(t, framework.SpotInterruptionWarning(region, "i-0123456789abcdef0", time.Now()))

	receive := func() drivers.Interruption {
		t.Helper()
		for range 30 {
			batch, err := d.ReceiveInterruptions(ctx, class)
			require.NoError(t, err)
			if len(batch) > 0 {
				require.Len(t, batch, 1)
				return batch[0]
			}
		}
		require.FailNow(t, "the notice did not come")
		return drivers.Interruption{}
	}
	first := receive()
	assert.Equal(t, drivers.InterruptionSpot, first.Kind)
	require.False(t, first.Received.IsZero(), "SQS says when it first delivered the message")
	assert.True(t, first.Received.After(before) && first.Received.Before(time.Now().Add(time.Second)), "%s", first.Received)
	again := receive()
	assert.NotEqual(t, first.Receipt, again.Receipt, "delivered again")
	assert.True(t, first.Received.Equal(again.Received), "first delivered at %s, then %s", first.Received, again.Received)
	require.NoError(t, d.AckInterruptions(ctx, class, []string{again.Receipt}))
}

// TestANoticeIsRedeliveredSoonerOnlyWhenAsked: a notice whose drain goes
// on through its deliveries (a lifecycle action heartbeaten on each) must
// come again before its hook's heartbeat timeout runs out, which may be
// shorter than the visibility timeout (Auto Scaling allows 30 s). Asked
// to, the queue gives it again within the time asked (moto's SQS, as
// ChangeMessageVisibility sets it); a time no sooner than the visibility
// timeout changes nothing, and a receipt already deleted is no error.
func TestANoticeIsRedeliveredSoonerOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "nodeset-sooner")
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second, VisibilityTimeout: time.Hour,
		Queues: func(ctx context.Context, region string, creds map[string][]byte) (Queues, error) { return q.SQS, nil }})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL}
	q.Put(t, framework.TerminateLifecycleAction(region, "g", HookName, "i-0123456789abcdef0", "token-sooner", time.Now()))

	receive := func(tries int) []drivers.Interruption {
		t.Helper()
		for range tries {
			batch, err := d.ReceiveInterruptions(ctx, class)
			require.NoError(t, err)
			if len(batch) > 0 {
				return batch
			}
		}
		return nil
	}
	first := receive(30)
	require.Len(t, first, 1, "the notice came")
	require.NoError(t, d.RedeliverInterruption(ctx, class, first[0].Receipt, 2*time.Hour), "no sooner than the visibility timeout")
	assert.Empty(t, receive(3), "hidden for the visibility timeout (an hour) when not asked for sooner")

	require.NoError(t, d.RedeliverInterruption(ctx, class, first[0].Receipt, time.Second))
	again := receive(30)
	require.Len(t, again, 1, "given again within the time asked")
	assert.Equal(t, "token-sooner", again[0].Lifecycle.Token)
	require.NoError(t, d.AckInterruptions(ctx, class, []string{again[0].Receipt}))
	assert.NoError(t, d.RedeliverInterruption(ctx, class, again[0].Receipt, time.Second), "a receipt already deleted")
}

// TestAutoScalingsOwnNotificationsThroughSQS: a lifecycle action Auto
// Scaling sends to a hook's notification target has no region; it is
// received as the EventBridge event, its region left to the class's, and
// its test notification names no machine (nothing to do, not unreadable).
func TestAutoScalingsOwnNotificationsThroughSQS(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	q := framework.NewInterruptionQueue(t, w.endpoint, region, "nodeset-direct")
	d := New(Options{Cluster: "prod", Clients: awscloud.SDKClients(w.endpoint), ReceiveWait: time.Second, VisibilityTimeout: time.Minute,
		Queues: func(ctx context.Context, region string, creds map[string][]byte) (Queues, error) { return q.SQS, nil }})
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Interruptions = &nodesetv1alpha1.EKSInterruptions{QueueURL: q.URL}
	q.Send(t, `{"AccountId":"123456789012","RequestId":"r-test","AutoScalingGroupARN":"arn:aws:autoscaling:`+region+`:123456789012:autoScalingGroup:042cba90:autoScalingGroupName/my-asg","AutoScalingGroupName":"my-asg","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2026-11-23T12:00:00.063Z"}`)
	q.Send(t, directLifecycleAction)

	var got []drivers.Interruption
	for range 30 {
		batch, err := d.ReceiveInterruptions(ctx, class)
		require.NoError(t, err)
		got = append(got, batch...)
		if len(got) >= 2 {
			break
		}
	}
	require.Len(t, got, 2)
	for _, n := range got {
		assert.Equal(t, drivers.InterruptionTermination, n.Kind, n.Detail)
		if n.Lifecycle == nil {
			assert.Empty(t, n.MachineIDs, "the test notification names no machine")
			continue
		}
		assert.Equal(t, []string{"i-1234567890abcdef0"}, n.MachineIDs)
		assert.Equal(t, "87654321-4321-4321-4321-210987654321", n.Lifecycle.Token)
		assert.Empty(t, n.Lifecycle.Region, "no region in Auto Scaling's own form: the class's is used")
		assert.Equal(t, region, actionRegion(class, *n.Lifecycle))
	}
}
