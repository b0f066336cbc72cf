package eksasg

import (
	"context"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"nodeset.dev/nodeset/drivers/awscloud"
)

// Every instance of a group is protected from scale-in: a desired capacity
// below the instances the group has (a launch Auto Scaling started while
// lowerUnlaunched lowered the group, someone lowering it by hand, a scaling
// policy someone added) then makes Auto Scaling terminate none of them;
// only nodeset's TerminateInstanceInAutoScalingGroup, which protection does
// not block, takes an instance out. Health check replacements and spot
// interruptions are not blocked either. New instances are protected by the
// group's NewInstancesProtectedFromScaleIn; those of a group made before,
// or whose protection someone removed, by SetInstanceProtection.

// unprotected are the ids of the group's instances that scale-in could
// pick: in service or on standby, and not protected. Auto Scaling protects
// an instance from when it is in service, so a pending one waits for the
// next look.
func unprotected(g *asgtypes.AutoScalingGroup) []string {
	var ids []string
	for _, i := range g.Instances {
		switch i.LifecycleState {
		case asgtypes.LifecycleStateInService, asgtypes.LifecycleStateStandby:
			if !aws.ToBool(i.ProtectedFromScaleIn) {
				ids = append(ids, aws.ToString(i.InstanceId))
			}
		}
	}
	return ids
}

// protectedFromScaleIn reports whether the group protects the instances it
// launches and every instance scale-in could pick.
func protectedFromScaleIn(g *asgtypes.AutoScalingGroup) bool {
	return aws.ToBool(g.NewInstancesProtectedFromScaleIn) && len(unprotected(g)) == 0
}

// protect protects the group's instances that are not, 50 a call (Auto
// Scaling's limit).
func protect(ctx context.Context, asg awscloud.AutoScaling, g *asgtypes.AutoScalingGroup) error {
	name, ids := aws.ToString(g.AutoScalingGroupName), unprotected(g)
	if len(ids) == 0 {
		return nil
	}
	for ids := range slices.Chunk(ids, 50) {
		if _, err := asg.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{AutoScalingGroupName: aws.String(name),
			InstanceIds: ids, ProtectedFromScaleIn: aws.Bool(true)}); err != nil {
			return awscloud.Classify("protecting the instances of "+name+" from scale-in", err)
		}
	}
	return nil
}

// unprotectForDeletion removes the protection of the group's instances
// before it is deleted with ForceDelete, 50 a call. AWS's ForceDelete
// terminates protected instances too, moto's only unprotected ones: either
// way the instances go with their group.
func unprotectForDeletion(ctx context.Context, asg awscloud.AutoScaling, g *asgtypes.AutoScalingGroup) error {
	name := aws.ToString(g.AutoScalingGroupName)
	var ids []string
	for _, i := range g.Instances {
		if aws.ToBool(i.ProtectedFromScaleIn) && !strings.HasPrefix(string(i.LifecycleState), "Terminat") {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
	}
	for ids := range slices.Chunk(ids, 50) {
		if _, err := asg.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{AutoScalingGroupName: aws.String(name),
			InstanceIds: ids, ProtectedFromScaleIn: aws.Bool(false)}); err != nil {
			return awscloud.Classify("removing the scale-in protection of the instances of "+name+" before deleting it", err)
		}
	}
	return nil
}
