package eksasg

import (
	"context"

	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// An instance an operator put on standby (EnterStandby) stays in its
// group, out of service, until it is put back (ExitStandby): Auto Scaling
// neither health-checks it nor picks it on scale-in, and it does not count
// toward the desired capacity (EnterStandby lowers it by one, or Auto
// Scaling launches a replacement). nodeset keeps it too: its Node stays
// and counts as one of the NodeSet's replicas, so the group's desired
// capacity is what the NodeSet asks for less its instances on standby.

// statusOf is the group's status (awscloud.StatusOf) with its instances on
// standby kept as running machines, and how many they are.
func statusOf(name string, g *asgtypes.AutoScalingGroup, details map[string]ec2types.Instance) (drivers.GroupStatus, int32) {
	status := awscloud.StatusOf(name, g, details)
	standby := awscloud.OnStandby(g)
	for i, m := range status.Machines {
		if id, err := awscloud.InstanceID(m.ProviderID); err == nil && standby[id] && m.State == drivers.MachineStopping {
			status.Machines[i].State = drivers.MachineRunning
		}
	}
	return status, int32(len(standby))
}

// groupStatus describes the group afresh, with its instances: its status
// and how many of them are on standby.
func groupStatus(ctx context.Context, asg awscloud.AutoScaling, ec2c awscloud.EC2, name string) (drivers.GroupStatus, int32, error) {
	g, err := awscloud.FindGroup(ctx, asg, name)
	if err != nil {
		return drivers.GroupStatus{}, 0, err
	}
	details, err := awscloud.DescribeInstances(ctx, ec2c, []asgtypes.AutoScalingGroup{*g})
	if err != nil {
		return drivers.GroupStatus{}, 0, err
	}
	status, standby := statusOf(name, g, details)
	return status, standby, nil
}

// inService is the desired capacity of a group whose NodeSet asks for
// replicas: its instances on standby are among them.
func inService(replicas int32, g *asgtypes.AutoScalingGroup) int32 {
	if g == nil {
		return replicas
	}
	return max(0, replicas-int32(len(awscloud.OnStandby(g))))
}
