package framework

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
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
