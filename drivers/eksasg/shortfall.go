package eksasg

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// A group Auto Scaling cannot fill keeps its desired capacity and goes on
// trying. When its NodeSet asks for fewer meanwhile (scaled down, a rollout
// over), no Node is there to be removed, and the instances nobody wants
// any more would be launched once the capacity is back, only to be drained
// and terminated again. Such a group's desired capacity is lowered to what
// the NodeSet asks for, never below the instances the group has: a desired
// capacity below them would make Auto Scaling pick instances to terminate.

// lowerUnlaunched lowers the desired capacity of a group that runs fewer
// instances than it wants while Auto Scaling cannot launch them (its latest
// scaling activity failed or was cancelled) to what replicas ask for (less
// the instances on standby), or to the number of instances the group has
// (in any state but standby) when that is more. A group whose
// latest activity is still running (a launch on its way) is left as it is.
// The group and its activities are read afresh first, at most once per
// PollInterval for a group that stays over-asked; the activities read
// serves the group's status message too.
func (d *Driver) lowerUnlaunched(ctx context.Context, asg awscloud.AutoScaling, region string, credentials map[string][]byte, replicas int32,
	status drivers.GroupStatus, standby int32) (drivers.GroupStatus, error) {
	if status.State != "ACTIVE" || status.DesiredSize <= max(0, replicas-standby) || int32(len(status.Machines))-standby >= status.DesiredSize {
		return status, nil
	}
	now := d.opts.Now()
	d.mu.Lock()
	look := d.shortfalls[status.Name]
	if !look.lowerLook.IsZero() && now.Sub(look.lowerLook) < d.opts.PollInterval {
		d.mu.Unlock()
		return status, nil
	}
	look.lowerLook = now
	d.shortfalls[status.Name] = look
	d.mu.Unlock()

	g, err := awscloud.FindGroup(ctx, asg, status.Name)
	if err != nil {
		return status, err
	}
	desired := aws.ToInt32(g.DesiredCapacity)
	target := max(inService(replicas, g), int32(len(g.Instances)-len(awscloud.OnStandby(g))))
	if g.Status != nil || target >= desired || !protectedFromScaleIn(g) {
		return status, nil // or a scale-in could pick an unprotected instance
	}
	// The read serves the group's status message too (withLaunchFailure).
	failed, err := d.readActivities(ctx, asg, status.Name, now)
	if failed == nil || err != nil {
		return status, err // launching, or not short for want of capacity
	}
	defer d.invalidate(region, credentials)
	if _, err := asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
		AutoScalingGroupName: aws.String(status.Name), DesiredCapacity: aws.Int32(target), HonorCooldown: aws.Bool(false)}); err != nil {
		return status, awscloud.Classify("lowering the desired capacity of "+status.Name+" to the instances it has", err)
	}
	// A launch Auto Scaling started since the fresh look makes the group
	// have more instances than it now wants. Protected, none of them is
	// scaled in; the desired capacity goes back to what the group runs, so
	// each of nodeset's terminations can take its decrement (a decrement
	// below the minimum size of 0 would be refused).
	if g, err = awscloud.FindGroup(ctx, asg, status.Name); err != nil {
		return status, err
	}
	if runs := awscloud.Counted(g); runs > target {
		if _, err := asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
			AutoScalingGroupName: aws.String(status.Name), DesiredCapacity: aws.Int32(runs), HonorCooldown: aws.Bool(false)}); err != nil {
			return status, awscloud.Classify("raising the desired capacity of "+status.Name+" back to the instances it runs", err)
		}
		target = runs
	}
	// Lowered: the next call may look again at once. The activity read
	// stays the group's look; its message counts the new desired capacity.
	d.mu.Lock()
	look = d.shortfalls[status.Name]
	look.lowerLook = time.Time{}
	d.shortfalls[status.Name] = look
	d.mu.Unlock()
	status.DesiredSize = target
	return status, nil
}
