package awscloud

import (
	"context"
	"slices"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"nodeset.dev/nodeset/drivers"
)

// StrayInstances are the instances tagged with the cluster that are not
// shutting down or terminated and that no Auto Scaling group holds: left
// behind by a group deleted under them, detached by someone, or left by a
// termination that failed half way. Each carries the owner its tags name
// and its launch time. It fails rather than return a partial list.
func StrayInstances(ctx context.Context, asg AutoScaling, ec2c EC2, cluster string) ([]drivers.MachineStatus, error) {
	details := map[string]ec2types.Instance{}
	pages := ec2.NewDescribeInstancesPaginator(ec2c, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + TagCluster), Values: []string{cluster}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, Classify("listing the instances of cluster "+cluster, err)
		}
		for _, r := range page.Reservations {
			for _, inst := range r.Instances {
				if !gone(inst) && instanceOwner(inst.Tags).Cluster == cluster {
					details[aws.ToString(inst.InstanceId)] = inst
				}
			}
		}
	}
	ids := make([]string, 0, len(details))
	for id := range details {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for chunk := range slices.Chunk(ids, 50) {
		out, err := asg.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: chunk})
		if err != nil {
			return nil, Classify("looking up the Auto Scaling groups of instances", err)
		}
		for _, i := range out.AutoScalingInstances {
			delete(details, aws.ToString(i.InstanceId))
		}
	}
	var strays []drivers.MachineStatus
	for _, id := range ids {
		inst, ok := details[id]
		if !ok {
			continue
		}
		m := drivers.MachineStatus{Name: aws.ToString(inst.PrivateDnsName), State: drivers.MachineRunning, Owner: instanceOwner(inst.Tags),
			Message: "in no Auto Scaling group"}
		if inst.Placement != nil {
			m.ProviderID = ProviderID(aws.ToString(inst.Placement.AvailabilityZone), id)
		} else {
			m.ProviderID = ProviderID("", id)
		}
		if inst.LaunchTime != nil {
			m.CreatedAt = inst.LaunchTime.Unix()
		}
		if inst.State != nil && inst.State.Name == ec2types.InstanceStateNamePending {
			m.State = drivers.MachinePending
		}
		for _, t := range inst.Tags {
			if aws.ToString(t.Key) == TagTemplateHash {
				m.TemplateHash = aws.ToString(t.Value)
			}
		}
		strays = append(strays, m)
	}
	return strays, nil
}

// instanceOwner is the NodeSet that an instance's tags name.
func instanceOwner(tags []ec2types.Tag) drivers.Owner {
	byKey := make(map[string]string, len(tags))
	for _, t := range tags {
		byKey[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return OwnerFromTagMap(byKey)
}
