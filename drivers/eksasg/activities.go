package eksasg

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// Auto Scaling accepts a desired capacity it cannot reach and keeps trying:
// no capacity for the instance types in the subnets' zones, an image that
// is gone, a spot price below the market, a KMS key its service-linked role
// may not use. Such a failure is never an API error, only a failed scaling
// activity of the group, so a short group's activities are read for the
// group's status message.

// launchFailure is a look at why a group runs short, and when it was taken.
type launchFailure struct {
	taken   time.Time
	message string
}

// withLaunchFailure puts in status why the group runs fewer instances than
// it wants, when Auto Scaling's latest activity on it failed. A group stays
// short for as long as AWS lacks the capacity, and is polled often
// meanwhile, so its activities are read at most once per PollInterval; a
// group that is not short costs no call. A failed read is logged, not
// returned: the instances the group has still get their Nodes.
func (d *Driver) withLaunchFailure(ctx context.Context, asg awscloud.AutoScaling, credentials map[string][]byte, status drivers.GroupStatus) drivers.GroupStatus {
	now := d.opts.Now()
	d.mu.Lock()
	look, ok := d.failures[status.Name]
	if !short(status) {
		delete(d.failures, status.Name)
		d.mu.Unlock()
		return status
	}
	d.mu.Unlock()
	if !ok || now.Sub(look.taken) >= d.opts.PollInterval {
		message, err := lastFailedActivity(ctx, asg, status)
		if err != nil {
			awscloud.Redact(credentials, &err)
			klog.FromContext(ctx).Info("Could not read the scaling activities of the group", "group", status.Name, "err", err)
			return status
		}
		look = launchFailure{taken: now, message: message}
		d.mu.Lock()
		d.failures[status.Name] = look
		d.mu.Unlock()
	}
	status.Message = look.message
	return status
}

// lastFailedActivity is the group's latest scaling activity, when it failed
// or was cancelled; "" otherwise (one in progress comes first).
func lastFailedActivity(ctx context.Context, asg awscloud.AutoScaling, status drivers.GroupStatus) (string, error) {
	a, err := latestFailedActivity(ctx, asg, status.Name)
	if a == nil || err != nil {
		return "", err
	}
	said := aws.ToString(a.StatusMessage)
	if said == "" {
		said = aws.ToString(a.Description)
	}
	return fmt.Sprintf("%d of %d instances run; Auto Scaling's latest activity %s: %s", live(status), status.DesiredSize,
		strings.ToLower(string(a.StatusCode)), said), nil
}

// latestFailedActivity is the group's latest scaling activity when it
// failed or was cancelled, nil otherwise (none, or one in progress or done).
func latestFailedActivity(ctx context.Context, asg awscloud.AutoScaling, group string) (*asgtypes.Activity, error) {
	out, err := asg.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{
		AutoScalingGroupName: aws.String(group), MaxRecords: aws.Int32(1)})
	if err != nil {
		return nil, awscloud.Classify("describing the scaling activities of "+group, err)
	}
	if len(out.Activities) == 0 {
		return nil, nil
	}
	switch a := out.Activities[0]; a.StatusCode {
	case asgtypes.ScalingActivityStatusCodeFailed, asgtypes.ScalingActivityStatusCodeCancelled:
		return &a, nil
	}
	return nil, nil
}

// short reports whether an active group runs fewer instances (not counting
// those on their way out) than its desired capacity.
func short(status drivers.GroupStatus) bool {
	return status.State == "ACTIVE" && live(status) < status.DesiredSize
}

func live(status drivers.GroupStatus) int32 {
	n := int32(0)
	for _, m := range status.Machines {
		if m.State != drivers.MachineStopping {
			n++
		}
	}
	return n
}
