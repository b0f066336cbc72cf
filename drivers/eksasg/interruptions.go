package eksasg

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	autoscalingtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/pkg/redact"
)

// HookName is the termination lifecycle hook the driver puts on every group
// of a class with interruptions.
const HookName = "nodeset-termination"

// Defaults of a class's interruptions section.
const (
	defaultHeartbeatTimeout = 5 * time.Minute
	// spotNotice is how long before the interruption AWS sends its warning.
	spotNotice = 2 * time.Minute
)

// Queues is the part of the SQS API the driver uses.
type Queues interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// LifecycleActions are the Auto Scaling calls that let an instance in
// Terminating:Wait go, or keep it there longer.
type LifecycleActions interface {
	CompleteLifecycleAction(context.Context, *autoscaling.CompleteLifecycleActionInput, ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error)
	RecordLifecycleActionHeartbeat(context.Context, *autoscaling.RecordLifecycleActionHeartbeatInput, ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
}

// LifecycleHooks are the Auto Scaling calls that put the termination hook
// on a group.
type LifecycleHooks interface {
	PutLifecycleHook(context.Context, *autoscaling.PutLifecycleHookInput, ...func(*autoscaling.Options)) (*autoscaling.PutLifecycleHookOutput, error)
	DescribeLifecycleHooks(context.Context, *autoscaling.DescribeLifecycleHooksInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
	DeleteLifecycleHook(context.Context, *autoscaling.DeleteLifecycleHookInput, ...func(*autoscaling.Options)) (*autoscaling.DeleteLifecycleHookOutput, error)
}

var (
	_ drivers.InterruptionSource     = (*Driver)(nil)
	_ drivers.InterruptionRedelivery = (*Driver)(nil)
)

// interruptionsOf is the class's interruptions section, nil when it has none.
func interruptionsOf(class drivers.Class) *nodesetv1alpha1.EKSInterruptions {
	if s := class.Spec.EKSAutoscalingGroup; s != nil {
		return s.Interruptions
	}
	return nil
}

// HeartbeatTimeout is the heartbeat timeout of the class's termination hook.
func HeartbeatTimeout(in *nodesetv1alpha1.EKSInterruptions) time.Duration {
	if in == nil || in.HeartbeatTimeout == nil {
		return defaultHeartbeatTimeout
	}
	return in.HeartbeatTimeout.Duration
}

// SQSFrom makes SQS clients from shared configurations
// (awscloud.NewAWSConfigs), one per configuration.
func SQSFrom(configs func(ctx context.Context, region string, creds map[string][]byte) (*aws.Config, error)) func(context.Context, string, map[string][]byte) (Queues, error) {
	var (
		mu      sync.Mutex
		clients = map[*aws.Config]*sqs.Client{}
	)
	return func(ctx context.Context, region string, creds map[string][]byte) (Queues, error) {
		cfg, err := configs(ctx, region, creds)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if c, ok := clients[cfg]; ok {
			return c, nil
		}
		c := sqs.NewFromConfig(*cfg)
		clients[cfg] = c
		return c, nil
	}
}

// validateInterruptions checks what the schema cannot: the queue URL's
// shape, and that the longest drain fits Auto Scaling's limits for the
// heartbeat timeout.
func validateInterruptions(in *nodesetv1alpha1.EKSInterruptions) error {
	if in == nil {
		return nil
	}
	const field = "spec.eksAutoscalingGroup.interruptions"
	u, err := url.Parse(in.QueueURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return drivers.InvalidConfiguration(field+".queueURL", "%q is not an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<queue>)", in.QueueURL)
	}
	heartbeat := HeartbeatTimeout(in)
	if heartbeat < 30*time.Second || heartbeat > 2*time.Hour {
		return drivers.InvalidConfiguration(field+".heartbeatTimeout", "%s is outside 30s to 2h", heartbeat)
	}
	if in.MaxDrainTime != nil {
		limit := min(100*heartbeat, 48*time.Hour)
		if in.MaxDrainTime.Duration > limit {
			return drivers.InvalidConfiguration(field+".maxDrainTime", "%s is longer than Auto Scaling keeps an instance waiting with a heartbeat timeout of %s (%s: 100 heartbeat timeouts, at most 48h)",
				in.MaxDrainTime.Duration, heartbeat, limit)
		}
	}
	switch in.Rebalance {
	case "", nodesetv1alpha1.RebalanceTaint, nodesetv1alpha1.RebalanceReplaceFirst:
	default:
		return drivers.InvalidConfiguration(field+".rebalance", "%q is neither Taint nor ReplaceFirst", in.Rebalance)
	}
	return nil
}

// hookRelook is how often the termination hook of a group is looked at
// again, to put back what was changed or deleted by hand: at most one
// group's hook per look at the region's groups (view.hookLook), the most
// overdue ones first as they come.
const hookRelook = 10 * time.Minute

// hookState is what the driver knows of a group's termination hook.
type hookState struct {
	// seconds is the hook's heartbeat timeout; 0 for no hook.
	seconds int32
	// looked is when Auto Scaling last described it (or it was put); zero
	// when it was never looked at (a class without interruptions).
	looked time.Time
}

// wantHook is the heartbeat timeout, in seconds, of the hook the class
// wants; 0 for none.
func wantHook(in *nodesetv1alpha1.EKSInterruptions) int32 {
	if in == nil {
		return 0
	}
	return int32(HeartbeatTimeout(in) / time.Second)
}

// ensureHook puts the termination lifecycle hook on the group when the
// class handles interruptions, and removes nodeset's hook when it stopped.
// It is remembered per group, so a steady group costs no call; lookAtHook
// looks at it again.
func (d *Driver) ensureHook(ctx context.Context, asg awscloud.AutoScaling, group string, in *nodesetv1alpha1.EKSInterruptions) error {
	want := wantHook(in)
	d.mu.Lock()
	have, known := d.hooks[group]
	if !known && want == 0 {
		// A class without interruptions costs no call: a hook is looked
		// for (and removed) only when this process put it, or saw the
		// class with it.
		d.hooks[group] = hookState{}
		have, known = d.hooks[group], true
	}
	d.mu.Unlock()
	if known && have.seconds == want {
		return nil
	}
	return d.lookAtHook(ctx, asg, group, in)
}

// hookDue reports whether the group's hook, known to be as the class wants
// it, was last looked at hookRelook ago or more. A group without a hook
// is never due: a class without interruptions costs no hook call.
func (d *Driver) hookDue(group string, in *nodesetv1alpha1.EKSInterruptions) bool {
	want := wantHook(in)
	d.mu.Lock()
	defer d.mu.Unlock()
	have, ok := d.hooks[group]
	return ok && want != 0 && have.seconds == want && d.opts.Now().Sub(have.looked) >= hookRelook
}

// lookAtHook describes the group's hook and puts it as the class wants
// it, or removes it when the class wants none.
func (d *Driver) lookAtHook(ctx context.Context, asg awscloud.AutoScaling, group string, in *nodesetv1alpha1.EKSInterruptions) error {
	want := wantHook(in)
	hooks, ok := asg.(LifecycleHooks)
	if !ok {
		if want == 0 {
			return nil
		}
		return fmt.Errorf("eks-asg: the Auto Scaling client cannot put lifecycle hooks")
	}
	out, err := hooks.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{
		AutoScalingGroupName: aws.String(group), LifecycleHookNames: []string{HookName}})
	if err != nil {
		return awscloud.Classify("describing the lifecycle hook of "+group, err)
	}
	var current *autoscalingtypes.LifecycleHook
	for i, h := range out.LifecycleHooks {
		if aws.ToString(h.LifecycleHookName) == HookName {
			current = &out.LifecycleHooks[i]
		}
	}
	switch {
	case want == 0 && current == nil:
	case want == 0:
		if _, err := hooks.DeleteLifecycleHook(ctx, &autoscaling.DeleteLifecycleHookInput{
			AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String(HookName)}); err != nil {
			return awscloud.Classify("deleting the lifecycle hook of "+group, err)
		}
	case current != nil && hookAsPut(*current, want):
	default:
		// The hook is nodeset's (named for it, put by it): whatever was
		// changed on it is put back. CONTINUE when nodeset does not answer
		// in time: the instance goes as it would have without the hook
		// (ABANDON would terminate it just the same, and the group's
		// replacement would come later). No notification target: Auto
		// Scaling sends the lifecycle events to EventBridge by itself, and
		// a target it was given besides is cleared with an empty ARN.
		put := &autoscaling.PutLifecycleHookInput{
			AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String(HookName),
			LifecycleTransition: aws.String(terminatingTransition),
			HeartbeatTimeout:    aws.Int32(want), DefaultResult: aws.String(hookDefaultResult),
		}
		if current != nil && aws.ToString(current.NotificationTargetARN) != "" {
			put.NotificationTargetARN = aws.String("")
		}
		if _, err := hooks.PutLifecycleHook(ctx, put); err != nil {
			return awscloud.Classify("putting the termination lifecycle hook on "+group, err)
		}
	}
	d.mu.Lock()
	d.hooks[group] = hookState{seconds: want, looked: d.opts.Now()}
	d.mu.Unlock()
	return nil
}

// What nodeset's termination hook is, besides its heartbeat timeout.
const (
	terminatingTransition = "autoscaling:EC2_INSTANCE_TERMINATING"
	launchingTransition   = "autoscaling:EC2_INSTANCE_LAUNCHING"
	hookDefaultResult     = "CONTINUE"
)

// hookAsPut reports whether h is nodeset's termination hook as ensureHook
// puts it, with a heartbeat timeout of heartbeat seconds.
func hookAsPut(h autoscalingtypes.LifecycleHook, heartbeat int32) bool {
	return aws.ToInt32(h.HeartbeatTimeout) == heartbeat && aws.ToString(h.DefaultResult) == hookDefaultResult &&
		aws.ToString(h.LifecycleTransition) == terminatingTransition && aws.ToString(h.NotificationTargetARN) == ""
}

// hookKnown reports whether the group's hook is known to be as the class
// wants it.
func (d *Driver) hookKnown(group string, in *nodesetv1alpha1.EKSInterruptions) bool {
	want := wantHook(in)
	d.mu.Lock()
	defer d.mu.Unlock()
	have, ok := d.hooks[group]
	return (ok && have.seconds == want) || (!ok && want == 0)
}

// InterruptionQueue is the class's queue URL, "" when it handles no
// interruptions.
func (d *Driver) InterruptionQueue(class drivers.Class) string {
	if in := interruptionsOf(class); in != nil {
		return in.QueueURL
	}
	return ""
}

// queueRegion is the region in an SQS queue URL
// (https://sqs.<region>.amazonaws.com/...), else fallback.
func queueRegion(queueURL, fallback string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return fallback
	}
	parts := strings.Split(u.Hostname(), ".")
	if len(parts) >= 3 && parts[0] == "sqs" && strings.HasPrefix(parts[2], "amazonaws") {
		return parts[1]
	}
	return fallback
}

func (d *Driver) queues(ctx context.Context, class drivers.Class) (Queues, string, error) {
	s, err := section(class)
	if err != nil {
		return nil, "", err
	}
	in := s.Interruptions
	if in == nil {
		return nil, "", drivers.InvalidConfiguration("spec.eksAutoscalingGroup.interruptions", "is not set")
	}
	if d.opts.Queues == nil {
		return nil, "", errors.New("eks-asg: no SQS client")
	}
	if err := awscloud.CheckCredentials(class); err != nil {
		return nil, "", err
	}
	q, err := d.opts.Queues(ctx, queueRegion(in.QueueURL, s.Region), class.Credentials)
	return q, in.QueueURL, err
}

// ReceiveInterruptions long-polls the class's queue (Options.ReceiveWait)
// for up to ten messages and reads each as an EventBridge event, bare or in
// SNS's envelope. A message that is no event nodeset knows comes back as
// InterruptionUnparseable.
func (d *Driver) ReceiveInterruptions(ctx context.Context, class drivers.Class) (_ []drivers.Interruption, err error) {
	defer awscloud.Redact(class.Credentials, &err)
	q, queueURL, err := d.queues(ctx, class)
	if err != nil {
		return nil, err
	}
	out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10,
		WaitTimeSeconds:             int32(d.opts.ReceiveWait / time.Second),
		VisibilityTimeout:           int32(d.opts.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateFirstReceiveTimestamp},
	})
	if err != nil {
		return nil, awscloud.Classify("receiving from "+queueURL, err)
	}
	maxDrain := maxDrainTime(class)
	classRegion := class.Spec.EKSAutoscalingGroup.Region
	notices := make([]drivers.Interruption, 0, len(out.Messages))
	for _, m := range out.Messages {
		body := unwrapped([]byte(aws.ToString(m.Body)))
		n := ParseEvent(body, maxDrain)
		if n.Lifecycle != nil {
			// The action is heartbeaten and completed where its group is.
			region := eventRegion(body, "")
			n.Lifecycle.Region = region
			// Classes of other heartbeat timeouts may share the queue: the
			// action waits by its own group's hook, and no longer than
			// Auto Scaling keeps an instance waiting with it. When the
			// hook cannot be looked up, its timeout is left unknown (0),
			// not taken from the class the queue was read with. The node
			// controller sets both again by the machine's own class
			// (LifecycleHeartbeatTimeout, LifecycleDeadline) once it knows
			// the machine's Node.
			heartbeat := d.groupHeartbeatTimeout(ctx, class, cmp.Or(region, classRegion), n.Lifecycle.Group)
			n.Lifecycle.HeartbeatTimeout = heartbeat
			n.Deadline = d.LifecycleDeadline(class, n.Notice, heartbeat)
		}
		n.Receipt = aws.ToString(m.ReceiptHandle)
		n.Received = firstReceived(m.Attributes)
		if n.ID == "" {
			n.ID = aws.ToString(m.MessageId)
		}
		notices = append(notices, n)
	}
	return notices, nil
}

// firstReceived is when SQS first delivered a message
// (ApproximateFirstReceiveTimestamp, in milliseconds since the epoch), or
// zero when it does not say.
func firstReceived(attributes map[string]string) time.Time {
	ms, err := strconv.ParseInt(attributes[string(sqstypes.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)], 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// maxDrainTime is how long the class lets an instance wait in its
// lifecycle action for the drain: interruptions.maxDrainTime, else the
// drain timeout, else 10 minutes.
func maxDrainTime(class drivers.Class) time.Duration {
	maxDrain := 10 * time.Minute
	if class.Spec.Drain != nil && class.Spec.Drain.Timeout != nil {
		maxDrain = class.Spec.Drain.Timeout.Duration
	}
	if in := interruptionsOf(class); in != nil && in.MaxDrainTime != nil {
		maxDrain = in.MaxDrainTime.Duration
	}
	return maxDrain
}

// LifecycleHeartbeatTimeout is heartbeat, the timeout of the action's hook
// as read from it, else (0: unknown) the class's: nodeset puts the hook on
// each group of the class with the class's heartbeat timeout.
func (d *Driver) LifecycleHeartbeatTimeout(class drivers.Class, heartbeat time.Duration) time.Duration {
	if heartbeat > 0 {
		return heartbeat
	}
	return HeartbeatTimeout(interruptionsOf(class))
}

// LifecycleDeadline is notice plus the class's maxDrainTime, and no later
// than Auto Scaling keeps an instance waiting with heartbeats of the hook's
// timeout (the class's when unknown): 100 timeouts, at most 48 hours.
func (d *Driver) LifecycleDeadline(class drivers.Class, notice time.Time, heartbeat time.Duration) time.Time {
	if heartbeat <= 0 {
		heartbeat = HeartbeatTimeout(interruptionsOf(class))
	}
	return notice.Add(min(maxDrainTime(class), 100*heartbeat, 48*time.Hour))
}

// groupHeartbeatTimeout is the heartbeat timeout of nodeset's hook on
// group: as this process put or last saw it within hookRelook, else as
// Auto Scaling describes it (in region, with the class's credentials), else
// 0 (unknown): the class the queue was read with may be another than the
// group's.
func (d *Driver) groupHeartbeatTimeout(ctx context.Context, class drivers.Class, region, group string) time.Duration {
	const fallback = 0
	d.mu.Lock()
	known := d.hooks[group]
	d.mu.Unlock()
	if known.seconds > 0 && d.opts.Now().Sub(known.looked) < hookRelook {
		return time.Duration(known.seconds) * time.Second
	}
	if d.opts.Clients == nil {
		return fallback
	}
	asg, _, err := d.opts.Clients(ctx, region, class.Credentials)
	if err != nil {
		return fallback
	}
	hooks, ok := asg.(LifecycleHooks)
	if !ok {
		return fallback
	}
	out, err := hooks.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{
		AutoScalingGroupName: aws.String(group), LifecycleHookNames: []string{HookName}})
	if err != nil {
		return fallback
	}
	for _, h := range out.LifecycleHooks {
		if seconds := aws.ToInt32(h.HeartbeatTimeout); aws.ToString(h.LifecycleHookName) == HookName && seconds > 0 {
			if hookAsPut(h, seconds) {
				// Remembered as ensureHook would: a hook changed
				// otherwise is put back at the group's next look.
				d.mu.Lock()
				d.hooks[group] = hookState{seconds: seconds, looked: d.opts.Now()}
				d.mu.Unlock()
			}
			return time.Duration(seconds) * time.Second
		}
	}
	return fallback
}

// eventRegion is the region of an EventBridge event when it is one the
// SDK knows or fallback itself, else fallback. Each region read gets AWS
// clients of its own, kept for the life of the process, and a call there
// before the event is handled: a region only named like one (a message
// sent to the queue by anyone who may) would make clients that are never
// let go, one set per name, and a call to an endpoint with no DNS name
// that the SDK retries while the queue's other notices wait.
func eventRegion(body []byte, fallback string) string {
	var e struct {
		Region string `json:"region"`
	}
	if json.Unmarshal(body, &e) != nil || (e.Region != fallback && !awscloud.KnownRegion(e.Region)) {
		return fallback
	}
	return e.Region
}

// AckInterruptions deletes handled messages from the class's queue in
// batches of ten. A receipt already deleted, or expired, is not an error:
// its message comes again and is handled again, idempotently.
func (d *Driver) AckInterruptions(ctx context.Context, class drivers.Class, receipts []string) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	q, queueURL, err := d.queues(ctx, class)
	if err != nil {
		return err
	}
	for start := 0; start < len(receipts); start += 10 {
		batch := receipts[start:min(start+10, len(receipts))]
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(batch))
		for i, r := range batch {
			entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: aws.String(r)}
		}
		out, err := q.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
		if err != nil {
			return awscloud.Classify("deleting messages from "+queueURL, err)
		}
		for _, f := range out.Failed {
			if !receiptGone(f) {
				return fmt.Errorf("deleting a message from %s: %s: %s", queueURL, aws.ToString(f.Code), aws.ToString(f.Message))
			}
		}
	}
	return nil
}

// RedeliverInterruption has a received message come again within after,
// when that is sooner than the visibility timeout it was received with
// (Options.VisibilityTimeout): ChangeMessageVisibility counts the new
// timeout from the call, in whole seconds (at least one here). A receipt
// SQS no longer takes is not an error: its message comes again anyway.
func (d *Driver) RedeliverInterruption(ctx context.Context, class drivers.Class, receipt string, after time.Duration) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	if after >= d.opts.VisibilityTimeout {
		return nil
	}
	q, queueURL, err := d.queues(ctx, class)
	if err != nil {
		return err
	}
	_, err = q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(queueURL),
		ReceiptHandle: aws.String(receipt), VisibilityTimeout: int32(max(after/time.Second, 1))})
	var (
		invalid  *sqstypes.ReceiptHandleIsInvalid
		inFlight *sqstypes.MessageNotInflight
	)
	if errors.As(err, &invalid) || errors.As(err, &inFlight) ||
		(awscloud.IsCode(err, "InvalidParameterValue") && strings.Contains(err.Error(), "ReceiptHandle")) {
		return nil
	}
	return awscloud.Classify("changing the visibility of a message of "+queueURL, err)
}

// receiptGone reports whether a failed delete is for a receipt handle SQS
// no longer takes: ReceiptHandleIsInvalid, or, for one whose visibility
// timeout ran out, InvalidParameterValue ("Value ... for parameter
// ReceiptHandle is invalid. Reason: The receipt handle has expired.").
func receiptGone(f sqstypes.BatchResultErrorEntry) bool {
	switch aws.ToString(f.Code) {
	case "ReceiptHandleIsInvalid":
		return f.SenderFault
	case "InvalidParameterValue":
		return f.SenderFault && strings.Contains(aws.ToString(f.Message), "ReceiptHandle")
	}
	return false
}

// actionRegion is the region of a lifecycle action's group: the one its
// notice named, else the class's.
func actionRegion(class drivers.Class, action drivers.LifecycleAction) string {
	if s := class.Spec.EKSAutoscalingGroup; s != nil {
		return cmp.Or(action.Region, s.Region)
	}
	return action.Region
}

// lifecycleActions is the client for the lifecycle actions of action's
// group, in its region (actionRegion).
func (d *Driver) lifecycleActions(ctx context.Context, class drivers.Class, action drivers.LifecycleAction) (LifecycleActions, error) {
	region := actionRegion(class, action)
	_, asg, _, err := d.connect(ctx, class, region)
	if err != nil {
		return nil, err
	}
	if d.opts.Lifecycle != nil {
		return d.opts.Lifecycle(ctx, region, class.Credentials)
	}
	actions, ok := asg.(LifecycleActions)
	if !ok {
		return nil, errors.New("eks-asg: the Auto Scaling client cannot complete lifecycle actions")
	}
	return actions, nil
}

// CompleteLifecycleAction completes the action with CONTINUE, in its
// group's region: the instance goes on terminating. An action Auto Scaling
// no longer knows (completed before, or timed out) is not an error.
func (d *Driver) CompleteLifecycleAction(ctx context.Context, class drivers.Class, action drivers.LifecycleAction) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	actions, err := d.lifecycleActions(ctx, class, action)
	if err != nil {
		return err
	}
	_, err = actions.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String(action.Group), LifecycleHookName: aws.String(action.Hook),
		LifecycleActionToken: aws.String(action.Token), InstanceId: aws.String(action.MachineID),
		LifecycleActionResult: aws.String("CONTINUE"),
	})
	if awscloud.IsCode(err, "ValidationError") {
		return nil // no active lifecycle action: it is over
	}
	if err == nil {
		d.invalidate(actionRegion(class, action), class.Credentials)
	}
	return awscloud.Classify("completing the lifecycle action of "+action.MachineID, err)
}

// RecordLifecycleHeartbeat keeps the instance in Terminating:Wait for
// another heartbeat timeout, in its group's region. An action Auto Scaling no longer knows
// (completed, or timed out: the instance goes on terminating) has nothing
// left to keep waiting, and is not an error.
func (d *Driver) RecordLifecycleHeartbeat(ctx context.Context, class drivers.Class, action drivers.LifecycleAction) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	actions, err := d.lifecycleActions(ctx, class, action)
	if err != nil {
		return err
	}
	_, err = actions.RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(action.Group), LifecycleHookName: aws.String(action.Hook),
		LifecycleActionToken: aws.String(action.Token), InstanceId: aws.String(action.MachineID),
	})
	if awscloud.IsCode(err, "ValidationError") {
		// "No active Lifecycle Action found with token ...": the wait is
		// over. As an error it would fail each look at the drain (every
		// few seconds) with a call that cannot succeed.
		return nil
	}
	return awscloud.Classify("recording a lifecycle heartbeat for "+action.MachineID, err)
}

// snsEnvelope is what an SQS queue subscribed to an SNS topic receives
// (unless the subscription delivers raw messages): the published message,
// as a string, in Message.
type snsEnvelope struct {
	Type    string `json:"Type"`
	Message string `json:"Message"`
}

// unwrapped is the event in a message body: the body itself, or the
// message in SNS's envelope (an EventBridge rule that targets a topic the
// queue is subscribed to).
func unwrapped(body []byte) []byte {
	var sns snsEnvelope
	if json.Unmarshal(body, &sns) == nil && sns.Type == "Notification" && sns.Message != "" {
		return []byte(sns.Message)
	}
	return body
}

// event is an EventBridge event as delivered to an SQS target.
type event struct {
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Time       string          `json:"time"`
	Detail     json.RawMessage `json:"detail"`
}

// ec2Detail is the detail of the EC2 events (spot warning, rebalance
// recommendation, state change).
type ec2Detail struct {
	InstanceID     string `json:"instance-id"`
	InstanceAction string `json:"instance-action"`
	State          string `json:"state"`
}

// healthDetail is the detail of an AWS Health event.
type healthDetail struct {
	Service           string `json:"service"`
	EventTypeCode     string `json:"eventTypeCode"`
	EventTypeCategory string `json:"eventTypeCategory"`
	StatusCode        string `json:"statusCode"`
	StartTime         string `json:"startTime"`
	AffectedEntities  []struct {
		EntityValue string `json:"entityValue"`
	} `json:"affectedEntities"`
}

// lifecycleDetail is the detail of an Auto Scaling lifecycle action event.
type lifecycleDetail struct {
	LifecycleActionToken string `json:"LifecycleActionToken"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	LifecycleHookName    string `json:"LifecycleHookName"`
	EC2InstanceID        string `json:"EC2InstanceId"`
	LifecycleTransition  string `json:"LifecycleTransition"`
}

// autoScalingMessage is what Auto Scaling sends to a lifecycle hook's own
// notification target (an SQS queue, or an SNS topic the queue is
// subscribed to), without EventBridge's envelope: the lifecycle action's
// fields at the top level, or, once when the target is set, a test
// notification ("Event": "autoscaling:TEST_NOTIFICATION"). nodeset's hook
// has no target, but a queue may be named as the target of a hook by hand
// (nodeset's own, until it is put back, or another on the group);
// aws-node-termination-handler reads both forms the same way.
type autoScalingMessage struct {
	Service   string `json:"Service"`
	Event     string `json:"Event"`
	RequestID string `json:"RequestId"`
	Time      string `json:"Time"`
	lifecycleDetail
}

// autoScalingService is the Service of Auto Scaling's own notifications.
const autoScalingService = "AWS Auto Scaling"

// fromAutoScaling reads a message with no EventBridge envelope as Auto
// Scaling's own notification. A termination's lifecycle action comes
// back as the EventBridge event it also sends (ok), read the same way
// from there on; a test notification, or a launch's action (nodeset's
// hook is for terminations), comes back as a notice with no machine:
// there is nothing to do. Anything else is not Auto Scaling's, and is
// unparseable.
func fromAutoScaling(body []byte) (_ event, _ drivers.Interruption, ok bool) {
	var m autoScalingMessage
	if json.Unmarshal(body, &m) != nil || m.Service != autoScalingService {
		return event{}, drivers.Interruption{Kind: drivers.InterruptionUnparseable, Detail: "not an EventBridge event (no detail-type or detail)"}, false
	}
	switch {
	case m.Event == "autoscaling:TEST_NOTIFICATION" && m.LifecycleTransition == "":
		return event{}, drivers.Interruption{Kind: drivers.InterruptionTermination, ID: word(m.RequestID), Detail: m.Event}, false
	case m.Event == "" && m.LifecycleTransition == launchingTransition:
		return event{}, drivers.Interruption{Kind: drivers.InterruptionTermination, ID: word(m.RequestID), Detail: m.LifecycleTransition}, false
	case m.Event != "" || m.LifecycleTransition != terminatingTransition:
		return event{}, drivers.Interruption{Kind: drivers.InterruptionUnparseable,
			Detail: fmt.Sprintf("an Auto Scaling notification of event %s, transition %s, neither a termination's lifecycle action nor a test", shown(m.Event), shown(m.LifecycleTransition))}, false
	}
	detail, err := json.Marshal(m.lifecycleDetail)
	if err != nil {
		return event{}, drivers.Interruption{Kind: drivers.InterruptionUnparseable, Detail: err.Error()}, false
	}
	return event{ID: m.RequestID, DetailType: "EC2 Instance-terminate Lifecycle Action", Source: "aws.autoscaling", Time: m.Time, Detail: detail}, drivers.Interruption{}, true
}

// eventSources are the sources of the events nodeset reads, by detail-type:
// an event of another source (anyone's PutEvents) is not AWS's.
var eventSources = map[string]string{
	"EC2 Spot Instance Interruption Warning":  "aws.ec2",
	"EC2 Instance Rebalance Recommendation":   "aws.ec2",
	"EC2 Instance State-change Notification":  "aws.ec2",
	"AWS Health Event":                        "aws.health",
	"EC2 Instance-terminate Lifecycle Action": "aws.autoscaling",
}

// A queue message is text from outside: anyone allowed to send to the queue
// writes it, up to SQS's size limit. Of what it says, only words of the
// shapes AWS uses reach a Node's record, an Event or a log line.
var (
	// instanceIDPattern is an EC2 instance id (i- and 8 or 17 hex digits
	// at AWS; test doubles use other short ids).
	instanceIDPattern = regexp.MustCompile(`^i-[0-9A-Za-z]{1,17}$`)
	// wordPattern is a word of an event: its id, an instance action or
	// state, an AWS Health event type code, a lifecycle hook name.
	wordPattern = regexp.MustCompile(`^[A-Za-z0-9_./:-]{1,255}$`)
	// tokenPattern is a lifecycle action token (a UUID at AWS).
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// word is s when it is a word of the shape AWS uses, else "".
func word(s string) string {
	if wordPattern.MatchString(s) {
		return s
	}
	return ""
}

// groupName reports whether s can be an Auto Scaling group's name: 1 to 255
// characters, all printable.
func groupName(s string) bool {
	return s != "" && len(s) <= 255 && strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) < 0
}

// shown is s as the reason for an unreadable message tells it: quoted, and
// cut to 64 bytes at a character boundary (redact.Cut).
func shown(s string) string {
	return strconv.Quote(redact.Cut(s, 64))
}

// endingStates are the instance states that end a Node's machine.
var endingStates = map[string]bool{"stopping": true, "stopped": true, "shutting-down": true, "terminated": true}

// ParseEvent reads one EventBridge event, bare or in SNS's envelope
// (EventBridge to SNS to SQS). maxDrain is how long a lifecycle action may
// wait for its drain. Events nodeset has nothing to do for (an instance
// starting, a scheduled change that is over) come back with no machine;
// anything it cannot read is InterruptionUnparseable with the reason in
// Detail.
func ParseEvent(body []byte, maxDrain time.Duration) drivers.Interruption {
	unparseable := func(format string, args ...any) drivers.Interruption {
		return drivers.Interruption{Kind: drivers.InterruptionUnparseable, Detail: fmt.Sprintf(format, args...)}
	}
	var e event
	if err := json.Unmarshal(unwrapped(body), &e); err != nil {
		return unparseable("not JSON: %v", err)
	}
	if e.DetailType == "" {
		direct, n, ok := fromAutoScaling(unwrapped(body))
		if !ok {
			return n
		}
		e = direct
	}
	if e.DetailType == "" || len(e.Detail) == 0 {
		return unparseable("not an EventBridge event (no detail-type or detail)")
	}
	id := shown(e.ID)
	if source, ok := eventSources[e.DetailType]; ok && e.Source != source {
		return unparseable("event %s: a %q from %s, not %s", id, e.DetailType, shown(e.Source), source)
	}
	notice, err := time.Parse(time.RFC3339, e.Time)
	if err != nil {
		return unparseable("event %s: time %s is not RFC 3339", id, shown(e.Time))
	}
	n := drivers.Interruption{ID: word(e.ID), Notice: notice}
	switch e.DetailType {
	case "EC2 Spot Instance Interruption Warning", "EC2 Instance Rebalance Recommendation", "EC2 Instance State-change Notification":
		var d ec2Detail
		if err := json.Unmarshal(e.Detail, &d); err != nil || !instanceIDPattern.MatchString(d.InstanceID) {
			return unparseable("event %s (%s): no instance-id in its detail", id, e.DetailType)
		}
		switch e.DetailType {
		case "EC2 Spot Instance Interruption Warning":
			n.Kind, n.Deadline, n.Detail = drivers.InterruptionSpot, notice.Add(spotNotice), word(d.InstanceAction)
			if d.InstanceAction == "hibernate" {
				n.Deadline = notice // hibernation starts at once
			}
		case "EC2 Instance Rebalance Recommendation":
			n.Kind = drivers.InterruptionRebalance
		default:
			if d.State == "" {
				return unparseable("event %s (%s): no state in its detail", id, e.DetailType)
			}
			n.Kind, n.Deadline, n.Detail = drivers.InterruptionStateChange, notice, word(d.State)
			if !endingStates[d.State] {
				return n // pending, running: nothing to do
			}
		}
		n.MachineIDs = []string{d.InstanceID}
	case "AWS Health Event":
		var d healthDetail
		if err := json.Unmarshal(e.Detail, &d); err != nil {
			return unparseable("event %s (%s): %v", id, e.DetailType, err)
		}
		n.Kind, n.Detail, n.Deadline = drivers.InterruptionScheduled, word(d.EventTypeCode), notice
		if start, ok := healthTime(d.StartTime); ok {
			n.Deadline = start
		}
		if d.Service != "EC2" || d.EventTypeCategory != "scheduledChange" || d.StatusCode == "closed" {
			return n // not about EC2 instances going, or over: nothing to do
		}
		for _, entity := range d.AffectedEntities {
			if instanceIDPattern.MatchString(entity.EntityValue) {
				n.MachineIDs = append(n.MachineIDs, entity.EntityValue)
			}
		}
	case "EC2 Instance-terminate Lifecycle Action":
		var d lifecycleDetail
		if err := json.Unmarshal(e.Detail, &d); err != nil || !instanceIDPattern.MatchString(d.EC2InstanceID) || d.AutoScalingGroupName == "" {
			return unparseable("event %s (%s): no EC2InstanceId or AutoScalingGroupName in its detail", id, e.DetailType)
		}
		n.Kind, n.Deadline, n.MachineIDs, n.Detail = drivers.InterruptionTermination, notice.Add(maxDrain), []string{d.EC2InstanceID}, word(d.LifecycleHookName)
		if d.LifecycleHookName == HookName && (!groupName(d.AutoScalingGroupName) || (d.LifecycleActionToken != "" && !tokenPattern.MatchString(d.LifecycleActionToken))) {
			// The action is recorded on the Node and completed with these:
			// none of Auto Scaling's has them.
			return unparseable("event %s (%s): an AutoScalingGroupName or LifecycleActionToken Auto Scaling does not give", id, e.DetailType)
		}
		if d.LifecycleHookName == HookName && d.LifecycleActionToken != "" {
			n.Lifecycle = &drivers.LifecycleAction{Group: d.AutoScalingGroupName, Hook: d.LifecycleHookName,
				Token: d.LifecycleActionToken, MachineID: d.EC2InstanceID}
		}
	default:
		return unparseable("event %s: detail-type %s is not one nodeset handles", id, shown(e.DetailType))
	}
	return n
}

// healthTime reads an AWS Health time, which comes as RFC 1123 ("Fri, 27
// Jan 2023 06:02:51 GMT") or RFC 3339.
func healthTime(s string) (time.Time, bool) {
	// RFC 1123 also allows a day of one digit, which Go's layouts do not.
	for _, layout := range []string{time.RFC1123, time.RFC1123Z, "Mon, 2 Jan 2006 15:04:05 MST", "Mon, 2 Jan 2006 15:04:05 -0700", time.RFC3339} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}
