package eksasg

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"nodeset.dev/nodeset/drivers/awscloud"
)

// viewKey names a region seen with one set of credentials.
type viewKey struct{ region, credentials string }

func keyOf(region string, credentials map[string][]byte) viewKey {
	return viewKey{region, string(credentials[awscloud.CredentialAccessKeyID])}
}

// view is one look at every group of the cluster in a region, with their
// instances: what the driver knows between polls.
type view struct {
	mu sync.Mutex // held while looking, so concurrent callers share one look
	// generation counts invalidations; a look taken before the latest one
	// is not used.
	generation atomic.Uint64
	taken      time.Time
	takenAt    uint64
	groups     map[string]*asgtypes.AutoScalingGroup
	instances  map[string]ec2types.Instance
	// hookLook is set once a group's termination hook was looked at again
	// with this look: one such look per look at the region, so the calls of
	// a poll do not grow with the groups.
	hookLook atomic.Bool
}

// view returns a look at the region's groups no older than PollInterval and
// taken after the last change the driver made there.
func (d *Driver) view(ctx context.Context, asg awscloud.AutoScaling, ec2c awscloud.EC2, region string, credentials map[string][]byte) (*view, error) {
	d.mu.Lock()
	v, ok := d.views[keyOf(region, credentials)]
	if !ok {
		v = &view{}
		d.views[keyOf(region, credentials)] = v
	}
	d.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	generation := v.generation.Load()
	if v.groups != nil && v.takenAt == generation && d.opts.Now().Sub(v.taken) < d.opts.PollInterval {
		return v, nil
	}
	taken := d.opts.Now()
	var all []asgtypes.AutoScalingGroup
	pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(asg, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []asgtypes.Filter{{Name: aws.String("tag:" + awscloud.TagCluster), Values: []string{d.opts.Cluster}}}, MaxRecords: aws.Int32(100)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, awscloud.Classify("describing the Auto Scaling groups in "+region, err)
		}
		all = append(all, page.AutoScalingGroups...)
	}
	instances, err := awscloud.DescribeInstances(ctx, ec2c, all)
	if err != nil {
		return nil, err
	}
	groups := make(map[string]*asgtypes.AutoScalingGroup, len(all))
	for i := range all {
		if awscloud.OwnerFromTags(all[i].Tags).Cluster == d.opts.Cluster {
			groups[aws.ToString(all[i].AutoScalingGroupName)] = &all[i]
		}
	}
	v.groups, v.instances, v.taken, v.takenAt = groups, instances, taken, generation
	v.hookLook.Store(false)
	return v, nil
}

// invalidate makes the next EnsureGroup in the region look again.
func (d *Driver) invalidate(region string, credentials map[string][]byte) {
	d.mu.Lock()
	v := d.views[keyOf(region, credentials)]
	d.mu.Unlock()
	if v != nil {
		v.generation.Add(1)
	}
}

// templateKnown reports whether the group's launch template is known to
// have a version for hash.
func (d *Driver) templateKnown(group, hash string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.templates[group] == hash
}
