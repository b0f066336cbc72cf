package eksasg

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"k8s.io/klog/v2"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// A class's region may change under a running NodeSet: its group is made
// again in the new region, and each instance of the old region's group is
// terminated there, with its drained Node. What is left there is an empty
// group and its launch template, under the NodeSet's name, in a region no
// class may name any more. The driver learns the old region from the
// instances it terminates (their providerIDs' zones) and writes it on the
// current region's group (awscloud.TagFormerRegions), where it survives
// restarts; the old group is deleted once it holds no instance (EnsureGroup)
// or with the NodeSet (DeleteGroup), and only when its tags name the same
// NodeSet.

// recordFormerRegion writes region, where an instance of the group named
// name is terminated, on that group in the class's region, unless it is
// that region. It writes nothing when the class's region has no such group
// of the cluster: then there is nowhere to keep it.
func (d *Driver) recordFormerRegion(ctx context.Context, class drivers.Class, name, region string) error {
	current := class.Spec.EKSAutoscalingGroup.Region
	if region == current {
		return nil
	}
	asg, _, err := d.opts.Clients(ctx, current, class.Credentials)
	if err != nil {
		return err
	}
	g, err := awscloud.FindGroup(ctx, asg, name)
	if errors.Is(err, drivers.ErrNotFound) {
		return nil
	}
	if err != nil || awscloud.OwnerFromTags(g.Tags).Cluster != d.opts.Cluster {
		return err
	}
	have := awscloud.GroupTag(g, awscloud.TagFormerRegions)
	want := awscloud.FormerRegionsValue(append(awscloud.FormerRegions(have, current), region))
	if want == have {
		return nil
	}
	defer d.invalidate(current, class.Credentials)
	return setFormerRegions(ctx, asg, name, want)
}

// setFormerRegions writes the group's TagFormerRegions, or removes it when
// value is empty.
func setFormerRegions(ctx context.Context, asg awscloud.AutoScaling, name, value string) error {
	tag := asgtypes.Tag{ResourceId: aws.String(name), ResourceType: aws.String("auto-scaling-group"),
		Key: aws.String(awscloud.TagFormerRegions), Value: aws.String(value), PropagateAtLaunch: aws.Bool(false)}
	if value == "" {
		_, err := asg.DeleteTags(ctx, &autoscaling.DeleteTagsInput{Tags: []asgtypes.Tag{tag}})
		return awscloud.Classify("forgetting the former regions of "+name, err)
	}
	_, err := asg.CreateOrUpdateTags(ctx, &autoscaling.CreateOrUpdateTagsInput{Tags: []asgtypes.Tag{tag}})
	return awscloud.Classify("recording the former regions of "+name, err)
}

// removeFormerGroups deletes the groups, then the launch templates, that
// the group g of region (owned by owner) lists in its TagFormerRegions,
// and forgets each region once nothing of owner's is left there. A group
// whose tags name another owner, or none, is left alone and forgotten. A
// group that still holds instances or wants some is left until it does
// not, unless force (its NodeSet is being deleted, and its Nodes are
// gone). It reports whether something is left to remove.
func (d *Driver) removeFormerGroups(ctx context.Context, asg awscloud.AutoScaling, region string, credentials map[string][]byte,
	g *asgtypes.AutoScalingGroup, owner drivers.Owner, force bool) (bool, error) {
	have := awscloud.GroupTag(g, awscloud.TagFormerRegions)
	if have == "" {
		return false, nil
	}
	name := aws.ToString(g.AutoScalingGroupName)
	left, err := awscloud.RemoveFormerGroups(have, region, func(former string) ([]string, bool, error) {
		return d.removeFormerGroup(ctx, former, credentials, name, owner, force)
	})
	errs := []error{err}
	if want := awscloud.FormerRegionsValue(left); want != have {
		if err := setFormerRegions(ctx, asg, name, want); err != nil {
			errs = append(errs, err)
		}
		d.invalidate(region, credentials)
	}
	return len(left) > 0, errors.Join(errs...)
}

// removeFormerGroup removes owner's group name from region, then its launch
// template: gone once neither is owner's there. more are the regions that
// group itself had recorded.
func (d *Driver) removeFormerGroup(ctx context.Context, region string, credentials map[string][]byte, name string, owner drivers.Owner,
	force bool) (more []string, gone bool, err error) {
	asg, ec2c, err := d.opts.Clients(ctx, region, credentials)
	if err != nil {
		return nil, false, err
	}
	defer d.invalidate(region, credentials)
	g, err := awscloud.FindGroup(ctx, asg, name)
	switch {
	case errors.Is(err, drivers.ErrNotFound):
	case err != nil:
		return nil, false, err
	case !awscloud.OwnerFromTags(g.Tags).Matches(owner):
		return nil, true, nil // another's group under this name: never this NodeSet's to delete
	default:
		more = awscloud.FormerRegions(awscloud.GroupTag(g, awscloud.TagFormerRegions), region)
		if g.Status != nil || (!force && (len(g.Instances) > 0 || aws.ToInt32(g.DesiredCapacity) > 0)) {
			return more, false, nil // being deleted, or its instances' Nodes go first
		}
		if force {
			if err := unprotectForDeletion(ctx, asg, g); err != nil {
				return more, false, err
			}
		}
		// Without force, Auto Scaling itself refuses while an instance or
		// a scaling activity is left.
		_, err := asg.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: aws.String(name), ForceDelete: aws.Bool(force)})
		if err != nil && !awscloud.IsCode(err, "ResourceInUse") && !awscloud.IsCode(err, "ScalingActivityInProgress") {
			return more, false, awscloud.Classify("deleting Auto Scaling group "+name+" in "+region, err)
		}
		if _, err := awscloud.FindGroup(ctx, asg, name); !errors.Is(err, drivers.ErrNotFound) {
			return more, false, nil
		}
	}
	out, err := ec2c.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{name}})
	if launchTemplateNotFound(err) {
		return more, true, nil
	}
	if err != nil {
		return more, false, awscloud.Classify("describing launch template "+name+" in "+region, err)
	}
	for _, lt := range out.LaunchTemplates {
		tags := map[string]string{}
		for _, t := range lt.Tags {
			tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
		}
		if aws.ToString(lt.LaunchTemplateName) != name || !awscloud.OwnerFromTagMap(tags).Matches(owner) {
			continue
		}
		_, err := ec2c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateId: lt.LaunchTemplateId})
		if err != nil && !launchTemplateNotFound(err) {
			return more, false, awscloud.Classify("deleting launch template "+name+" in "+region, err)
		}
	}
	return more, true, nil
}

// removeFormerGroupsQuietly is removeFormerGroups for EnsureGroup: what it
// cannot remove now is tried again on the next call, and is no reason to
// leave the group of the current region unattended.
func (d *Driver) removeFormerGroupsQuietly(ctx context.Context, asg awscloud.AutoScaling, region string, credentials map[string][]byte,
	g *asgtypes.AutoScalingGroup, owner drivers.Owner) {
	if g == nil || awscloud.GroupTag(g, awscloud.TagFormerRegions) == "" {
		return
	}
	if _, err := d.removeFormerGroups(ctx, asg, region, credentials, g, owner, false); err != nil {
		awscloud.Redact(credentials, &err)
		klog.FromContext(ctx).Info("Could not remove the group of a former region yet", "group", aws.ToString(g.AutoScalingGroupName), "err", err)
	}
}
