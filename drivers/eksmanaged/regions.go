package eksmanaged

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// A class's region may change under a running NodeSet, as for eks-asg
// (see its regions.go): the node group is made again in the new region,
// the old one's instances are terminated there with their Nodes, and the
// emptied node group is left under the NodeSet's name in the class's
// cluster of the old region. The driver records the old region on the
// current node group (awscloud.TagFormerRegions) when it terminates an
// instance there, and deletes the old node group once it has no instance
// and wants none (EnsureGroup), or with the NodeSet (DeleteGroup), only
// when its tags name the same NodeSet. EKS deletes the Auto Scaling group
// and the launch template it made with it.

// recordFormerRegion writes region, where an instance of the node group
// name is terminated, on that node group in the class's region, unless it
// is that region. It writes nothing when the class's cluster has no such
// node group of the cluster.
func (d *Driver) recordFormerRegion(ctx context.Context, class drivers.Class, s *nodesetv1alpha1.EKSManagedNodeGroup, name, region string) error {
	if region == s.Region {
		return nil
	}
	api, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	if err != nil {
		return err
	}
	ng, err := describe(ctx, api.EKS, s.ClusterName, name)
	if errors.Is(err, drivers.ErrNotFound) {
		return nil
	}
	if err != nil || awscloud.OwnerFromTagMap(ng.Tags).Cluster != d.opts.Cluster {
		return err
	}
	have := ng.Tags[awscloud.TagFormerRegions]
	want := awscloud.FormerRegionsValue(append(awscloud.FormerRegions(have, s.Region), region))
	if want == have {
		return nil
	}
	return setFormerRegions(ctx, api.EKS, ng, want)
}

// setFormerRegions writes the node group's TagFormerRegions, or removes it
// when value is empty.
func setFormerRegions(ctx context.Context, api EKS, ng *ekstypes.Nodegroup, value string) error {
	name := aws.ToString(ng.NodegroupName)
	if value == "" {
		_, err := api.UntagResource(ctx, &eks.UntagResourceInput{ResourceArn: ng.NodegroupArn, TagKeys: []string{awscloud.TagFormerRegions}})
		return classify("forgetting the former regions of node group "+name, err)
	}
	_, err := api.TagResource(ctx, &eks.TagResourceInput{ResourceArn: ng.NodegroupArn, Tags: map[string]string{awscloud.TagFormerRegions: value}})
	return classify("recording the former regions of node group "+name, err)
}

// removeFormerGroups deletes the node groups that ng, of region and owned
// by owner, lists in its TagFormerRegions, in the cluster of the same name
// there, and forgets each region once no node group of owner's is left
// there. A node group whose tags name another owner, or none, is left
// alone and forgotten. One that still has instances or wants some is left
// until it does not, unless force (its NodeSet is being deleted, and its
// Nodes are gone). It reports whether something is left to remove.
func (d *Driver) removeFormerGroups(ctx context.Context, api API, region, cluster string, credentials map[string][]byte,
	ng *ekstypes.Nodegroup, owner drivers.Owner, force bool) (bool, error) {
	have := ng.Tags[awscloud.TagFormerRegions]
	if have == "" {
		return false, nil
	}
	left, err := awscloud.RemoveFormerGroups(have, region, func(former string) ([]string, bool, error) {
		return d.removeFormerGroup(ctx, former, cluster, credentials, aws.ToString(ng.NodegroupName), owner, force)
	})
	errs := []error{err}
	if want := awscloud.FormerRegionsValue(left); want != have {
		if err := setFormerRegions(ctx, api.EKS, ng, want); err != nil {
			errs = append(errs, err)
		}
	}
	return len(left) > 0, errors.Join(errs...)
}

// removeFormerGroup deletes owner's node group name from cluster in
// region: gone once it is not there, or not owner's. more are the regions
// that node group itself had recorded.
func (d *Driver) removeFormerGroup(ctx context.Context, region, cluster string, credentials map[string][]byte, name string, owner drivers.Owner,
	force bool) (more []string, gone bool, err error) {
	api, err := d.opts.Clients(ctx, region, credentials)
	if err != nil {
		return nil, false, err
	}
	ng, err := describe(ctx, api.EKS, cluster, name)
	switch {
	case errors.Is(err, drivers.ErrNotFound):
		return nil, true, nil
	case err != nil:
		return nil, false, err
	case !awscloud.OwnerFromTagMap(ng.Tags).Matches(owner):
		return nil, true, nil // another's node group under this name: never this NodeSet's to delete
	}
	more = awscloud.FormerRegions(ng.Tags[awscloud.TagFormerRegions], region)
	if ng.Status == ekstypes.NodegroupStatusDeleting {
		return more, false, nil
	}
	if !force {
		if ng.ScalingConfig == nil || aws.ToInt32(ng.ScalingConfig.DesiredSize) > 0 {
			return more, false, nil // its instances' Nodes go first
		}
		if asg := autoScalingGroup(ng); asg != "" {
			instances, err := awscloud.GroupInstances(ctx, api.AutoScaling, api.EC2, asg)
			switch {
			case errors.Is(err, drivers.ErrNotFound):
			case err != nil:
				return more, false, err
			case len(instances.Machines) > 0:
				return more, false, nil
			}
		}
	}
	_, err = api.EKS.DeleteNodegroup(ctx, &eks.DeleteNodegroupInput{ClusterName: aws.String(cluster), NodegroupName: aws.String(name)})
	switch {
	case awscloud.IsCode(err, "ResourceNotFoundException"):
		return more, true, nil
	case err != nil && !awscloud.IsCode(err, "ResourceInUseException"):
		return more, false, classify("deleting node group "+name+" in "+region, err)
	}
	return more, false, nil // EKS takes minutes; the next call sees it gone
}

// removeFormerGroupsQuietly is removeFormerGroups for EnsureGroup: what it
// cannot remove now is tried again on the next call, and is no reason to
// leave the node group of the current region unattended.
func (d *Driver) removeFormerGroupsQuietly(ctx context.Context, api API, s *nodesetv1alpha1.EKSManagedNodeGroup, credentials map[string][]byte,
	ng *ekstypes.Nodegroup, owner drivers.Owner) {
	if ng == nil || ng.Tags[awscloud.TagFormerRegions] == "" {
		return
	}
	owner.Cluster = d.opts.Cluster
	if _, err := d.removeFormerGroups(ctx, api, s.Region, s.ClusterName, credentials, ng, owner, false); err != nil {
		awscloud.Redact(credentials, &err)
		klog.FromContext(ctx).Info("Could not remove the node group of a former region yet", "nodegroup", aws.ToString(ng.NodegroupName), "err", err)
	}
}
