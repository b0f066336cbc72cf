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

// shortfall is the driver's last look at a group that runs short: its
// scaling activities, read for its status message (withLaunchFailure) and
// for its lowering (lowerUnlaunched), once per PollInterval for both.
type shortfall struct {
	// read is when the activities were read, and failed the latest one
	// then when it failed or was cancelled (nil otherwise).
	read   time.Time
	failed *asgtypes.Activity
	// lowerLook is when the group was last read afresh to be lowered.
	lowerLook time.Time
}

// withLaunchFailure puts in status why the group runs fewer instances than
// it wants, when Auto Scaling's latest activity on it failed. A group stays
// short for as long as AWS lacks the capacity, and is polled often
// meanwhile, so its activities are read at most once per PollInterval (a
// read lowerUnlaunched made serves too); a group that is not short costs
// no call. A failed read is logged, not returned: the instances the group
// has still get their Nodes.
func (d *Driver) withLaunchFailure(ctx context.Context, asg awscloud.AutoScaling, credentials map[string][]byte, status drivers.GroupStatus) drivers.GroupStatus {
	now := d.opts.Now()
	d.mu.Lock()
	look, ok := d.shortfalls[status.Name]
	if !short(status) {
		delete(d.shortfalls, status.Name)
		d.mu.Unlock()
		return status
	}
	d.mu.Unlock()
	if !ok || look.read.IsZero() || now.Sub(look.read) >= d.opts.PollInterval {
		failed, err := d.readActivities(ctx, asg, status.Name, now)
		if err != nil {
			awscloud.Redact(credentials, &err)
			klog.FromContext(ctx).Info("Could not read the scaling activities of the group", "group", status.Name, "err", err)
			return status
		}
		look.failed = failed
	}
	status.Message = failureMessage(status, look.failed)
	return status
}

// readActivities reads the group's latest failed or cancelled scaling
// activity (nil when there is none) and keeps it as the group's look, taken
// at now.
func (d *Driver) readActivities(ctx context.Context, asg awscloud.AutoScaling, group string, now time.Time) (*asgtypes.Activity, error) {
	failed, err := latestFailedActivity(ctx, asg, group)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	look := d.shortfalls[group]
	look.read, look.failed = now, failed
	d.shortfalls[group] = look
	d.mu.Unlock()
	return failed, nil
}

// failureMessage says why the group runs short, from its latest failed
// or cancelled activity; "" for none.
func failureMessage(status drivers.GroupStatus, a *asgtypes.Activity) string {
	if a == nil {
		return ""
	}
	said := aws.ToString(a.StatusMessage)
	if said == "" {
		said = aws.ToString(a.Description)
	}
	return fmt.Sprintf("%d of %d instances run; Auto Scaling's latest activity %s: %s", live(status), status.DesiredSize,
		strings.ToLower(string(a.StatusCode)), said)
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
