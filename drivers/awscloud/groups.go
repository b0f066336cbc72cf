package awscloud

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"nodeset.dev/nodeset/drivers"
)

// ProviderID is the Node providerID of an instance, as the AWS cloud
// provider writes it.
func ProviderID(zone, instanceID string) string { return "aws:///" + zone + "/" + instanceID }

var providerIDRE = regexp.MustCompile(`^aws:///[^/]*/(i-[0-9a-f]+)$`)

// InstanceID is the instance id of an aws:/// providerID.
func InstanceID(providerID string) (string, error) {
	m := providerIDRE.FindStringSubmatch(providerID)
	if m == nil {
		return "", fmt.Errorf("%q is not an aws:///<zone>/<instance id> providerID", providerID)
	}
	return m[1], nil
}

// FindGroup describes the Auto Scaling group name, or returns ErrNotFound.
func FindGroup(ctx context.Context, asg AutoScaling, name string) (*asgtypes.AutoScalingGroup, error) {
	out, err := asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		return nil, Classify("describing Auto Scaling group "+name, err)
	}
	for i := range out.AutoScalingGroups {
		if aws.ToString(out.AutoScalingGroups[i].AutoScalingGroupName) == name {
			return &out.AutoScalingGroups[i], nil
		}
	}
	return nil, fmt.Errorf("the Auto Scaling group %s: %w", name, drivers.ErrNotFound)
}

// GroupInstances describes the Auto Scaling group name with its instances
// (names, launch times, template hashes), or ErrNotFound.
func GroupInstances(ctx context.Context, asg AutoScaling, ec2c EC2, name string) (drivers.GroupStatus, error) {
	g, err := FindGroup(ctx, asg, name)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	instances, err := DescribeInstances(ctx, ec2c, []asgtypes.AutoScalingGroup{*g})
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	return StatusOf(name, g, instances), nil
}

// DescribeInstances describes the instances of groups, 200 ids a call. The
// ids are a filter, not InstanceIds: Auto Scaling lists an instance it has
// just launched before EC2 describes it (eventual consistency), and
// DescribeInstances refuses a whole call that names an id it does not know
// (InvalidInstanceID.NotFound), which would fail the look at every group of
// the region for one launch. An instance EC2 does not describe yet is
// missing from the answer, and its Node waits for its name.
func DescribeInstances(ctx context.Context, ec2c EC2, groups []asgtypes.AutoScalingGroup) (map[string]ec2types.Instance, error) {
	var ids []string
	for _, g := range groups {
		for _, i := range g.Instances {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
	}
	details := map[string]ec2types.Instance{}
	for chunk := range slices.Chunk(ids, 200) {
		pages := ec2.NewDescribeInstancesPaginator(ec2c, &ec2.DescribeInstancesInput{
			Filters: []ec2types.Filter{{Name: aws.String("instance-id"), Values: chunk}}})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, Classify("describing instances", err)
			}
			for _, r := range page.Reservations {
				for _, inst := range r.Instances {
					details[aws.ToString(inst.InstanceId)] = inst
				}
			}
		}
	}
	return details, nil
}

// OnStandby are the ids of the group's instances on standby, or entering
// it: put there by an operator (EnterStandby) to look at and put back
// (ExitStandby), out of service but not leaving. Auto Scaling neither
// health-checks them nor picks them on scale-in, and its desired capacity
// does not count them.
func OnStandby(g *asgtypes.AutoScalingGroup) map[string]bool {
	ids := map[string]bool{}
	for _, i := range g.Instances {
		if s := i.LifecycleState; s == asgtypes.LifecycleStateStandby || s == asgtypes.LifecycleStateEnteringStandby {
			ids[aws.ToString(i.InstanceId)] = true
		}
	}
	return ids
}

// StatusOf is a group's status, with its instances' names, launch times
// and template hashes from details.
func StatusOf(name string, g *asgtypes.AutoScalingGroup, details map[string]ec2types.Instance) drivers.GroupStatus {
	status := drivers.GroupStatus{Name: name, DesiredSize: aws.ToInt32(g.DesiredCapacity), State: "ACTIVE", Owner: OwnerFromTags(g.Tags)}
	if g.Status != nil {
		status.State = aws.ToString(g.Status) // "Delete in progress"
	}
	if g.CreatedTime != nil {
		status.CreatedAt = g.CreatedTime.Unix()
	}
	for _, i := range g.Instances {
		id := aws.ToString(i.InstanceId)
		m := drivers.MachineStatus{ProviderID: ProviderID(aws.ToString(i.AvailabilityZone), id), Owner: status.Owner, State: machineState(i.LifecycleState),
			Labels: InstanceLabels(aws.ToString(i.AvailabilityZone), aws.ToString(i.InstanceType))}
		if inst, ok := details[id]; ok {
			m.Name = aws.ToString(inst.PrivateDnsName)
			if inst.LaunchTime != nil {
				m.CreatedAt = inst.LaunchTime.Unix()
			}
			for _, t := range inst.Tags {
				if aws.ToString(t.Key) == TagTemplateHash {
					m.TemplateHash = aws.ToString(t.Value)
				}
			}
		}
		if aws.ToString(i.HealthStatus) == "Unhealthy" {
			m.State, m.Message = drivers.MachineFailed, "Auto Scaling reports the instance unhealthy"
		}
		status.Machines = append(status.Machines, m)
	}
	sort.Slice(status.Machines, func(a, b int) bool { return status.Machines[a].ProviderID < status.Machines[b].ProviderID })
	return status
}

func machineState(s asgtypes.LifecycleState) drivers.MachineState {
	switch {
	case s == asgtypes.LifecycleStateInService:
		return drivers.MachineRunning
	case strings.HasPrefix(string(s), "Pending"), strings.HasPrefix(string(s), "Warmed"):
		return drivers.MachinePending
	default: // Terminating*, Detaching, Detached, EnteringStandby, Standby
		return drivers.MachineStopping
	}
}

// TerminateInGroup terminates the instance of providerID in the Auto Scaling
// group and lowers the group's desired capacity in the same call (not for
// an instance on standby, which it does not count), and reports true. A
// decrement Auto Scaling refuses (the minimum size) is left out when the
// group runs more instances than it wants (terminateOverDesired; it
// reports false). An instance that is not in the group any more (terminated,
// detached by someone, or left behind by a termination that failed half
// way) is not taken as gone on the group's word: EC2 is asked, and an
// instance still running is terminated directly (no group is lowered, so it
// reports false). An instance that is now in another Auto Scaling group is
// that group's, and is left alone. A termination that fails is looked at
// again (goingAnyway): an instance out of the group or terminating by then
// is reported gone, not the error.
func TerminateInGroup(ctx context.Context, asg AutoScaling, ec2c EC2, group, providerID string) (bool, error) {
	id, err := InstanceID(providerID)
	if err != nil {
		return false, err
	}
	i, err := groupInstance(ctx, asg, id)
	if err != nil {
		return false, Classify("looking up "+id, err)
	}
	if i != nil {
		if other := aws.ToString(i.AutoScalingGroupName); other != group {
			return false, nil // someone else's now
		}
		if strings.HasPrefix(aws.ToString(i.LifecycleState), "Terminat") {
			return false, nil
		}
		// An instance on standby is not in the desired capacity: lowering
		// it for this one would make Auto Scaling pick another to go.
		standby := strings.HasSuffix(aws.ToString(i.LifecycleState), "Standby")
		_, err = asg.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(id), ShouldDecrementDesiredCapacity: aws.Bool(!standby)})
		decremented := err == nil
		if !standby && IsCode(err, "ValidationError") {
			decremented, err = terminateOverDesired(ctx, asg, group, id, err)
		} else {
			err = Classify("terminating "+id+" in "+group, err)
		}
		if err != nil && goingAnyway(ctx, asg, ec2c, group, id) {
			return false, nil
		}
		return decremented, err
	}
	return false, TerminateInstance(ctx, ec2c, id)
}

// goingAnyway reports whether instance id, whose termination in the group
// failed, is going all the same: out of the group, or terminating in it.
// A call whose response was lost did its work, and the SDK's retry of it
// finds the instance out of the group (AWS refuses it with a
// ValidationError, no such instance; moto fails with a 500); without this
// look, that would be reported as a refusal. An instance out of the group
// that still runs (a termination that failed half way) is terminated
// through EC2.
func goingAnyway(ctx context.Context, asg AutoScaling, ec2c EC2, group, id string) bool {
	i, err := groupInstance(ctx, asg, id)
	if err != nil {
		return false
	}
	if i != nil {
		return aws.ToString(i.AutoScalingGroupName) != group || strings.HasPrefix(aws.ToString(i.LifecycleState), "Terminat")
	}
	return TerminateInstance(ctx, ec2c, id) == nil
}

// groupInstance is Auto Scaling's record of instance id: its group and
// lifecycle state, or nil for an instance in no group.
func groupInstance(ctx context.Context, asg AutoScaling, id string) (*asgtypes.AutoScalingInstanceDetails, error) {
	found, err := asg.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return nil, err
	}
	for _, i := range found.AutoScalingInstances {
		if aws.ToString(i.InstanceId) == id {
			return &i, nil
		}
	}
	return nil, nil
}

// terminateOverDesired terminates instance id of the group without
// lowering its desired capacity when Auto Scaling refused the decrement
// (refused, the minimum size) and the group, read afresh, counts more
// instances than it wants, this one among them: it still has what it
// wants without it, so Auto Scaling launches no replacement. Such a group
// ran over its desired capacity (an instance launched while it was
// lowered, listed too late to raise it back). Otherwise the refusal
// stands: terminating without the decrement would launch a replacement.
//
// Two such terminations of one group are made one after the other, each
// reading the group after the one before it: made at once, each would
// count the other's instance, and together they could leave the group
// below its desired capacity, which Auto Scaling would fill with a launch.
func terminateOverDesired(ctx context.Context, asg AutoScaling, group, id string, refused error) (bool, error) {
	unlock := lockGroup(group)
	defer unlock()
	g, err := FindGroup(ctx, asg, group)
	if err != nil {
		return false, err
	}
	if aws.ToInt32(g.DesiredCapacity) >= Counted(g) || !slices.ContainsFunc(g.Instances, func(i asgtypes.Instance) bool {
		return aws.ToString(i.InstanceId) == id && counts(i)
	}) {
		return false, Classify("terminating "+id+" in "+group, refused)
	}
	_, err = asg.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(id), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	return false, Classify("terminating "+id+" in "+group+" (over its desired capacity)", err)
}

// groupLocks holds a mutex per Auto Scaling group name, for the
// terminations over a group's desired capacity (terminateOverDesired).
// One leading node controller makes them, so a lock in its memory orders
// them. A name stays once used: a handful of bytes per group.
var groupLocks sync.Map // of string to *sync.Mutex

// lockGroup locks group's mutex and returns its unlock.
func lockGroup(group string) func() {
	v, _ := groupLocks.LoadOrStore(group, &sync.Mutex{})
	m := v.(*sync.Mutex)
	m.Lock()
	return m.Unlock
}

// Counted is how many of the group's instances its desired capacity
// counts: all but those on standby, on their way out, or in a warm pool.
func Counted(g *asgtypes.AutoScalingGroup) int32 {
	n := int32(0)
	for _, i := range g.Instances {
		if counts(i) {
			n++
		}
	}
	return n
}

// counts reports whether its group's desired capacity counts the instance.
func counts(i asgtypes.Instance) bool {
	s := string(i.LifecycleState)
	return !strings.HasPrefix(s, "Terminat") && !strings.HasPrefix(s, "Detach") && !strings.HasPrefix(s, "Warmed") && !strings.HasSuffix(s, "Standby")
}

// TerminateInstance makes sure the instance id is terminated: nil when EC2
// does not know it or it is shutting down or terminated; otherwise it is
// terminated with TerminateInstances.
func TerminateInstance(ctx context.Context, ec2c EC2, id string) error {
	out, err := ec2c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if IsCode(err, "InvalidInstanceID.NotFound") {
		return nil
	}
	if err != nil {
		return Classify("describing instance "+id, err)
	}
	for _, r := range out.Reservations {
		for _, inst := range r.Instances {
			if aws.ToString(inst.InstanceId) != id || gone(inst) {
				continue
			}
			_, err := ec2c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
			if IsCode(err, "InvalidInstanceID.NotFound") {
				return nil
			}
			return Classify("terminating instance "+id, err)
		}
	}
	return nil
}

// gone reports whether an instance is shutting down or terminated.
func gone(inst ec2types.Instance) bool {
	return inst.State != nil && (inst.State.Name == ec2types.InstanceStateNameShuttingDown || inst.State.Name == ec2types.InstanceStateNameTerminated)
}
