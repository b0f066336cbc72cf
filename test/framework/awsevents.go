package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers/awscloud"
)

// AWSEvent is an EventBridge event in the shape AWS delivers it to an SQS
// target: the envelope, with the detail of one event type.
type AWSEvent struct {
	Version    string   `json:"version"`
	ID         string   `json:"id"`
	DetailType string   `json:"detail-type"`
	Source     string   `json:"source"`
	Account    string   `json:"account"`
	Time       string   `json:"time"`
	Region     string   `json:"region"`
	Resources  []string `json:"resources"`
	Detail     any      `json:"detail"`
}

// JSON is the event as a message body.
func (e AWSEvent) JSON() string {
	raw, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// DetailJSON is the event's detail alone, as PutEvents takes it.
func (e AWSEvent) DetailJSON() string {
	raw, err := json.Marshal(e.Detail)
	if err != nil {
		panic(err)
	}
	return string(raw)
}

const eventAccount = "123456789012"

var eventSeq atomic.Int64

func awsEvent(detailType, source, region string, at time.Time, resources []string, detail any) AWSEvent {
	return AWSEvent{Version: "0", ID: fmt.Sprintf("7a1c2e3d-0000-4000-8000-%012d", eventSeq.Add(1)), DetailType: detailType, Source: source,
		Account: eventAccount, Time: at.UTC().Format(time.RFC3339), Region: region, Resources: resources, Detail: detail}
}

func instanceARN(region, instanceID string) string {
	return fmt.Sprintf("arn:aws:ec2:%s:%s:instance/%s", region, eventAccount, instanceID)
}

// SpotInterruptionWarning is EC2's two-minute warning for a spot instance.
func SpotInterruptionWarning(region, instanceID string, at time.Time) AWSEvent {
	return awsEvent("EC2 Spot Instance Interruption Warning", "aws.ec2", region, at, []string{instanceARN(region, instanceID)},
		map[string]string{"instance-id": instanceID, "instance-action": "terminate"})
}

// RebalanceRecommendation is EC2's notice that a spot instance is at
// elevated risk of interruption.
func RebalanceRecommendation(region, instanceID string, at time.Time) AWSEvent {
	return awsEvent("EC2 Instance Rebalance Recommendation", "aws.ec2", region, at, []string{instanceARN(region, instanceID)},
		map[string]string{"instance-id": instanceID})
}

// InstanceStateChange is EC2's notice of an instance's new state.
func InstanceStateChange(region, instanceID, state string, at time.Time) AWSEvent {
	return awsEvent("EC2 Instance State-change Notification", "aws.ec2", region, at, []string{instanceARN(region, instanceID)},
		map[string]string{"instance-id": instanceID, "state": state})
}

// ScheduledInstanceRetirement is an AWS Health scheduled change for an EC2
// instance, starting at start.
func ScheduledInstanceRetirement(region, instanceID string, at, start time.Time) AWSEvent {
	return awsEvent("AWS Health Event", "aws.health", region, at, []string{instanceID}, map[string]any{
		"eventArn":          fmt.Sprintf("arn:aws:health:%s::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_%d", region, eventSeq.Load()),
		"service":           "EC2",
		"eventTypeCode":     "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
		"eventTypeCategory": "scheduledChange",
		"eventScopeCode":    "ACCOUNT_SPECIFIC",
		"communicationId":   fmt.Sprintf("comm-%d", eventSeq.Load()),
		"startTime":         start.UTC().Format(time.RFC1123),
		"endTime":           start.Add(time.Hour).UTC().Format(time.RFC1123),
		"lastUpdatedTime":   at.UTC().Format(time.RFC1123),
		"statusCode":        "upcoming",
		"eventRegion":       region,
		"eventDescription":  []map[string]string{{"language": "en_US", "latestDescription": "The instance is scheduled for retirement."}},
		"affectedEntities":  []map[string]string{{"entityValue": instanceID}},
	})
}

// TerminateLifecycleAction is Auto Scaling's notice that it terminates an
// instance and waits for the lifecycle hook hook.
func TerminateLifecycleAction(region, group, hook, instanceID, token string, at time.Time) AWSEvent {
	return awsEvent("EC2 Instance-terminate Lifecycle Action", "aws.autoscaling", region, at,
		[]string{fmt.Sprintf("arn:aws:autoscaling:%s:%s:autoScalingGroup:00000000-0000-4000-8000-000000000000:autoScalingGroupName/%s", region, eventAccount, group)},
		map[string]string{
			"LifecycleActionToken": token, "AutoScalingGroupName": group, "LifecycleHookName": hook,
			"EC2InstanceId": instanceID, "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
			"Origin": "AutoScalingGroup", "Destination": "EC2",
		})
}

// SNSNotification is the event as an SQS queue subscribed to an SNS topic
// receives it when an EventBridge rule targets the topic: SNS's JSON
// envelope with the event, as a string, in Message.
func (e AWSEvent) SNSNotification(topic string) string {
	raw, err := json.Marshal(map[string]string{
		"Type": "Notification", "MessageId": fmt.Sprintf("5d1e0c3a-0000-4000-8000-%012d", eventSeq.Add(1)), "TopicArn": topic,
		"Message": e.JSON(), "Timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), "SignatureVersion": "1",
		"Signature":      "EXAMPLE",
		"SigningCertURL": fmt.Sprintf("https://sns.%s.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem", e.Region),
		"UnsubscribeURL": fmt.Sprintf("https://sns.%s.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=%s:0000", e.Region, topic),
	})
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// InterruptionDetailTypes are the EventBridge detail types nodeset reads
// from an interruption queue.
var InterruptionDetailTypes = []string{"EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation",
	"EC2 Instance State-change Notification", "AWS Health Event", "EC2 Instance-terminate Lifecycle Action"}

// InterruptionQueue is an SQS queue that an EventBridge rule fills with
// the events nodeset handles, as docs/drivers/eks-asg.md sets it up.
type InterruptionQueue struct {
	URL    string
	SQS    *sqs.Client
	Events *eventbridge.Client
}

// NewInterruptionQueue makes the queue name and its rule at endpoint (moto).
func NewInterruptionQueue(t testing.TB, endpoint, region, name string) *InterruptionQueue {
	t.Helper()
	ctx := context.Background()
	cfg, err := awscloud.NewAWSConfigs(awscloud.SDKConfig{Endpoint: endpoint})(ctx, region, MotoCredentials)
	require.NoError(t, err)
	q := &InterruptionQueue{SQS: sqs.NewFromConfig(*cfg), Events: eventbridge.NewFromConfig(*cfg)}
	created, err := q.SQS.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	require.NoError(t, err)
	q.URL = aws.ToString(created.QueueUrl)
	attrs, err := q.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: created.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	pattern, err := json.Marshal(map[string][]string{"detail-type": InterruptionDetailTypes})
	require.NoError(t, err)
	_, err = q.Events.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(name), EventPattern: aws.String(string(pattern))})
	require.NoError(t, err)
	_, err = q.Events.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(name),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])}}})
	require.NoError(t, err)
	return q
}

// Put sends e through EventBridge (PutEvents), which delivers it to the
// queue in AWS's envelope.
func (q *InterruptionQueue) Put(t testing.TB, e AWSEvent) {
	t.Helper()
	out, err := q.Events.PutEvents(context.Background(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		Source: aws.String(e.Source), DetailType: aws.String(e.DetailType), Detail: aws.String(e.DetailJSON()), Resources: e.Resources}}})
	require.NoError(t, err)
	require.Zero(t, out.FailedEntryCount)
}

// Send puts body on the queue as it is (an event with its own envelope,
// such as one with a time EventBridge would not give it, or garbage).
func (q *InterruptionQueue) Send(t testing.TB, body string) {
	t.Helper()
	_, err := q.SQS.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)})
	require.NoError(t, err)
}

// Depth is how many messages the queue holds, visible or in flight.
func (q *InterruptionQueue) Depth(t testing.TB) int {
	t.Helper()
	out, err := q.SQS.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.URL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages, sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	n := 0
	for _, v := range out.Attributes {
		var i int
		_, _ = fmt.Sscan(v, &i)
		n += i
	}
	return n
}
