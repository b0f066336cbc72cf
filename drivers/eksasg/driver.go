// Package eksasg is the eks-asg group driver: a NodeSet is one EC2 Auto
// Scaling group of self-managed EKS workers, launched from a launch template
// the driver keeps in step with the class. The group's desired capacity is
// raised here, and lowered only to the instances the group has when AWS
// cannot launch the rest (lowerUnlaunched); otherwise it goes down only when
// a chosen, drained instance is terminated with the decrement in the same
// call, so AWS never picks a victim.
package eksasg

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// Options configure a Driver.
type Options struct {
	// Cluster is the name the node controller serves; it is part of every
	// name and tag, so two clusters in one account never see each other's
	// groups.
	Cluster string
	// Clients makes the API clients. Required.
	Clients awscloud.Clients
	// Scopes are where ListGroups looks for groups: the regions of the
	// classes served, each with the credentials of a class there. Required
	// for orphan collection.
	Scopes func() []Scope
	// PollInterval is how long one look at all the groups of a region (one
	// DescribeAutoScalingGroups and one DescribeInstances, paged, for every
	// NodeSet together) serves EnsureGroup calls that change nothing.
	// Default 15s.
	PollInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Clusters looks up the API endpoint, CA and service CIDR of a class's
	// EKS cluster when its bootstrap section leaves them out; without it
	// they are required.
	Clusters ClusterLookup
	// Queues makes the SQS client of a region, for classes that handle
	// interruptions.
	Queues func(ctx context.Context, region string, credentials map[string][]byte) (Queues, error)
	// Lifecycle makes the client that completes lifecycle actions; the Auto
	// Scaling client when nil.
	Lifecycle func(ctx context.Context, region string, credentials map[string][]byte) (LifecycleActions, error)
	// ReceiveWait is how long a receive waits for messages (SQS long
	// polling, whole seconds up to 20). Default 20s.
	ReceiveWait time.Duration
	// VisibilityTimeout is how long a received message stays hidden before
	// it comes again unless deleted. Default 30s.
	VisibilityTimeout time.Duration
}

// Scope is a region and the credentials to look in it with.
type Scope struct {
	Region      string
	Credentials map[string][]byte
	// Classes are the NodeClasses the scope is made from, for messages.
	Classes []string
}

// Driver serves NodeClasses with driver eks-asg.
type Driver struct {
	opts Options

	mu sync.Mutex
	// views are the cached looks at the groups, by region and credentials.
	views map[viewKey]*view
	// templates are the template hashes whose launch template version is
	// known to exist, by group.
	templates map[string]string
	// clusters are the EKS clusters looked up, by region and name.
	clusters map[string]ClusterInfo
	// hooks are the termination hooks known to be on the groups, by group.
	hooks map[string]hookState
	// shortfalls are the last looks at groups that run short of their
	// desired capacity, by group (activities.go).
	shortfalls map[string]shortfall
}

var (
	_ drivers.GroupDriver    = (*Driver)(nil)
	_ drivers.CloudValidator = (*Driver)(nil)
)

// New returns the eks-asg driver.
func New(opts Options) *Driver {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 15 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ReceiveWait <= 0 || opts.ReceiveWait > 20*time.Second {
		opts.ReceiveWait = 20 * time.Second
	}
	if opts.VisibilityTimeout <= 0 {
		opts.VisibilityTimeout = 30 * time.Second
	}
	return &Driver{opts: opts, views: map[viewKey]*view{}, templates: map[string]string{}, clusters: map[string]ClusterInfo{}, hooks: map[string]hookState{},
		shortfalls: map[string]shortfall{}}
}

// Name is the value of spec.driver the driver serves.
func (d *Driver) Name() string { return nodesetv1alpha1.DriverEKSASG }

func section(class drivers.Class) (*nodesetv1alpha1.EKSAutoscalingGroup, error) {
	return drivers.RequireSection(class.Spec.EKSAutoscalingGroup, "spec.eksAutoscalingGroup", nodesetv1alpha1.DriverEKSASG)
}

// connect returns the class's section and the API clients of region (the
// class's when empty) with its credentials; a class that names a
// credentials Secret without the keys is refused, never served with the
// node controller's own identity.
func (d *Driver) connect(ctx context.Context, class drivers.Class, region string) (*nodesetv1alpha1.EKSAutoscalingGroup, awscloud.AutoScaling, awscloud.EC2, error) {
	s, err := section(class)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := awscloud.CheckCredentials(class); err != nil {
		return nil, nil, nil, err
	}
	asg, ec2c, err := d.opts.Clients(ctx, cmp.Or(region, s.Region), class.Credentials)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, asg, ec2c, nil
}

// Validate checks the section's required fields and their shapes; it calls
// no API.
func (d *Driver) Validate(_ context.Context, class drivers.Class) error {
	s, err := section(class)
	if err != nil {
		return err
	}
	required := map[string]string{
		"spec.eksAutoscalingGroup.clusterName": s.ClusterName,
		"spec.eksAutoscalingGroup.region":      s.Region,
		"spec.eksAutoscalingGroup.imageID":     s.ImageID,
	}
	for _, field := range sortedKeys(required) {
		if required[field] == "" {
			return drivers.InvalidConfiguration(field, "is required")
		}
	}
	if !strings.HasPrefix(s.ImageID, "ami-") {
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.imageID", "%q is not an AMI id (ami-...)", s.ImageID)
	}
	switch {
	case s.InstanceType == "" && s.MixedInstances == nil:
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.instanceType", "is required unless mixedInstances lists the instance types")
	case s.InstanceType != "" && s.MixedInstances != nil:
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.mixedInstances", "cannot be set with instanceType: list every type in mixedInstances.instanceTypes")
	case s.MixedInstances != nil && len(s.MixedInstances.InstanceTypes) == 0:
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.mixedInstances.instanceTypes", "needs at least one instance type")
	}
	if len(s.SubnetIDs) == 0 {
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.subnetIDs", "needs at least one subnet")
	}
	for i, subnet := range s.SubnetIDs {
		if !strings.HasPrefix(subnet, "subnet-") {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.eksAutoscalingGroup.subnetIDs[%d]", i), "%q is not a subnet id (subnet-...)", subnet)
		}
	}
	if err := awscloud.ValidateTags("spec.eksAutoscalingGroup.tags", s.Tags); err != nil {
		return err
	}
	return validateInterruptions(s.Interruptions)
}

// ValidateCloud checks with read-only calls that the credentials Secret has
// its keys, that the region exists, that the image, the instance types, the
// subnets and the security groups exist in it, that the EKS cluster exists
// when its endpoint and CA are to be looked up, and that the credentials
// work.
func (d *Driver) ValidateCloud(ctx context.Context, class drivers.Class) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, _, ec2c, err := d.connect(ctx, class, "")
	if err != nil {
		return err
	}
	var once []func(*ec2.Options)
	if !awscloud.KnownRegion(s.Region) {
		// A region the SDK does not know: one try tells whether it answers.
		once = append(once, func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
	}
	images, err := ec2c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{s.ImageID}}, once...)
	if err != nil {
		if regionErr := awscloud.RegionError("spec.eksAutoscalingGroup.region", s.Region, err); regionErr != nil {
			return regionErr
		}
		return awscloud.Classify("spec.eksAutoscalingGroup.imageID "+s.ImageID, err)
	}
	if len(images.Images) == 0 {
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.imageID", "%s does not exist in %s", s.ImageID, s.Region)
	}
	rememberImage(s.Region, images.Images[0]) // its root volume is the template node's ephemeral storage
	if err := fitsImage(s.BlockDevices, images.Images[0]); err != nil {
		return err
	}
	field, types := "spec.eksAutoscalingGroup.instanceType", []string{s.InstanceType}
	if m := s.MixedInstances; m != nil {
		field, types = "spec.eksAutoscalingGroup.mixedInstances.instanceTypes", m.InstanceTypes
	}
	archs, err := awscloud.InstanceTypeArchitectures(ctx, ec2c, field, s.Region, types)
	if err != nil {
		return err
	}
	image := images.Images[0]
	for _, t := range types {
		if other := awscloud.OtherArchitecture(t, archs[t], string(image.Architecture)); other != "" {
			return drivers.InvalidConfiguration(field, "%s, and image %s is %s: every launch of it would fail", other, s.ImageID, image.Architecture)
		}
	}
	if err := awscloud.ValidateNetwork(ctx, ec2c, s.Region, "spec.eksAutoscalingGroup.subnetIDs", s.SubnetIDs,
		"spec.eksAutoscalingGroup.securityGroupIDs", s.SecurityGroupIDs); err != nil {
		return err
	}
	if b := s.Bootstrap; d.opts.Clusters != nil && (b == nil || b.APIServerEndpoint == "" || b.CertificateAuthority == "") {
		// Its NodeSets need the lookup: a cluster that does not exist is
		// the class's error, not theirs.
		if _, err := d.withCluster(ctx, class.Credentials, s); err != nil {
			return err
		}
	}
	return nil
}

// fitsImage refuses a volume smaller than the snapshot the image has for
// its device: every launch would fail with it.
func fitsImage(devices []nodesetv1alpha1.BlockDevice, image ec2types.Image) error {
	for i, b := range devices {
		for _, m := range image.BlockDeviceMappings {
			if aws.ToString(m.DeviceName) != b.DeviceName || m.Ebs == nil || m.Ebs.VolumeSize == nil || b.VolumeSize == nil {
				continue
			}
			if snapshot := aws.ToInt32(m.Ebs.VolumeSize); *b.VolumeSize < snapshot {
				return drivers.InvalidConfiguration(fmt.Sprintf("spec.eksAutoscalingGroup.blockDevices[%d].volumeSize", i),
					"%d GiB is smaller than the %d GiB snapshot image %s has for %s", *b.VolumeSize, snapshot, aws.ToString(image.ImageId), b.DeviceName)
			}
		}
	}
	return nil
}

// GroupName is the deterministic name of a NodeSet's group and launch
// template (drivers.GroupName: within the 255 characters Auto Scaling allows
// and the 128 of launch templates).
func GroupName(cluster, namespace, name string) string {
	return drivers.GroupName(drivers.Owner{Cluster: cluster, Namespace: namespace, Name: name})
}

func (d *Driver) tags(owner drivers.Owner, hash string, extra map[string]string) map[string]string {
	tags := map[string]string{}
	for k, v := range extra {
		tags[k] = v
	}
	tags[awscloud.TagCluster] = d.opts.Cluster
	tags[awscloud.TagNamespace] = owner.Namespace
	tags[awscloud.TagNodeSet] = owner.Name
	tags[awscloud.TagNodeSetUID] = string(owner.UID)
	if hash != "" {
		tags[awscloud.TagTemplateHash] = hash
	}
	return tags
}

// EnsureGroup makes the launch template and the group, or brings them in
// step: a new template version when the template hash changed, the bounds,
// and the desired capacity raised to the replicas (less the instances on
// standby), or lowered to them while AWS cannot launch the rest.
func (d *Driver) EnsureGroup(ctx context.Context, group drivers.Group) (_ drivers.GroupStatus, err error) {
	defer awscloud.Redact(group.Class.Credentials, &err)
	// The class was checked when it was written, a NodeSet's overrides (its
	// tags, ...) were not: what the driver refuses is refused before any
	// call.
	if err := d.Validate(ctx, group.Class); err != nil {
		return drivers.GroupStatus{}, err
	}
	s, asg, ec2c, err := d.connect(ctx, group.Class, "")
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	minSize, maxSize := group.MinReplicas, max(group.MaxReplicas, group.Replicas)
	owner := group.Owner
	owner.Cluster = d.opts.Cluster // what the driver tags its groups with
	// Most calls change nothing: answer them from the shared look at the
	// region's groups.
	if d.templateKnown(group.Name, group.TemplateHash) && d.hookKnown(group.Name, s.Interruptions) {
		v, err := d.view(ctx, asg, ec2c, s.Region, group.Class.Credentials)
		if err != nil {
			return drivers.GroupStatus{}, err
		}
		if g, ok := v.groups[group.Name]; ok && g.Status == nil && aws.ToInt32(g.MinSize) == minSize &&
			aws.ToInt32(g.MaxSize) >= maxSize && aws.ToInt32(g.DesiredCapacity) >= inService(group.Replicas, g) && rebalanceSuspended(g) &&
			launchesFromLatest(g, group.Name) && protectedFromScaleIn(g) {
			if err := awscloud.CheckOwner("Auto Scaling group", group.Name, awscloud.OwnerFromTags(g.Tags), owner); err != nil {
				return drivers.GroupStatus{}, err
			}
			// A hook changed or deleted by hand is put back at its next
			// look: every hookRelook, one group per look at the region.
			if d.hookDue(group.Name, s.Interruptions) && v.hookLook.CompareAndSwap(false, true) {
				if err := d.lookAtHook(ctx, asg, group.Name, s.Interruptions); err != nil {
					return drivers.GroupStatus{}, err
				}
			}
			status, standby := statusOf(group.Name, g, v.instances)
			status, err := d.lowerUnlaunched(ctx, asg, s.Region, group.Class.Credentials, group.Replicas, status, standby)
			if err != nil {
				return drivers.GroupStatus{}, err
			}
			status = d.withLaunchFailure(ctx, asg, group.Class.Credentials, status)
			d.removeFormerGroupsQuietly(ctx, asg, s.Region, group.Class.Credentials, g, owner)
			return status, nil
		}
	}
	defer d.invalidate(s.Region, group.Class.Credentials)
	// The group first: its launch template is not touched for a group that
	// is not the owner's.
	existing, err := awscloud.FindGroup(ctx, asg, group.Name)
	if err != nil && !errors.Is(err, drivers.ErrNotFound) {
		return drivers.GroupStatus{}, err
	}
	if existing != nil {
		if err := awscloud.CheckOwner("Auto Scaling group", group.Name, awscloud.OwnerFromTags(existing.Tags), owner); err != nil {
			return drivers.GroupStatus{}, err
		}
	}
	if err := d.ensureLaunchTemplate(ctx, ec2c, group, s); err != nil {
		return drivers.GroupStatus{}, err
	}
	d.mu.Lock()
	d.templates[group.Name] = group.TemplateHash
	d.mu.Unlock()
	if existing == nil {
		input := &autoscaling.CreateAutoScalingGroupInput{
			AutoScalingGroupName: aws.String(group.Name),
			MinSize:              aws.Int32(minSize),
			MaxSize:              aws.Int32(maxSize),
			DesiredCapacity:      aws.Int32(group.Replicas),
			VPCZoneIdentifier:    aws.String(strings.Join(s.SubnetIDs, ",")),
			CapacityRebalance:    s.CapacityRebalance,
			// Auto Scaling picks no victim when its desired capacity is
			// below its instances (protection.go).
			NewInstancesProtectedFromScaleIn: aws.Bool(true),
			// The template hash is the launch template version's, not the
			// group's: instances take it from the version they start from.
			Tags: asgTags(group.Name, d.tags(group.Owner, "", s.Tags)),
		}
		spec := &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(group.Name), Version: aws.String("$Latest")}
		if m := s.MixedInstances; m != nil {
			input.MixedInstancesPolicy = mixedInstances(spec, m)
		} else {
			input.LaunchTemplate = spec
		}
		if _, err := asg.CreateAutoScalingGroup(ctx, input); awscloud.IsCode(err, "AlreadyExists") {
			// Made meanwhile: by an earlier call of ours, or by someone else.
			if existing, err = awscloud.FindGroup(ctx, asg, group.Name); err != nil {
				return drivers.GroupStatus{}, err
			}
			if err := awscloud.CheckOwner("Auto Scaling group", group.Name, awscloud.OwnerFromTags(existing.Tags), owner); err != nil {
				return drivers.GroupStatus{}, err
			}
		} else if err != nil {
			return drivers.GroupStatus{}, awscloud.Classify("creating Auto Scaling group "+group.Name, err)
		}
		if err := suspendRebalance(ctx, asg, group.Name); err != nil {
			return drivers.GroupStatus{}, err
		}
		if err := d.ensureHook(ctx, asg, group.Name, s.Interruptions); err != nil {
			return drivers.GroupStatus{}, err
		}
	} else {
		// Made by a call that died before it suspended AZRebalance, or
		// resumed by someone since.
		if !rebalanceSuspended(existing) {
			if err := suspendRebalance(ctx, asg, group.Name); err != nil {
				return drivers.GroupStatus{}, err
			}
		}
		if err := d.ensureHook(ctx, asg, group.Name, s.Interruptions); err != nil {
			return drivers.GroupStatus{}, err
		}
		unprotectedGroup := !aws.ToBool(existing.NewInstancesProtectedFromScaleIn) // made before protection, or changed by hand
		if update := groupChanges(existing, group.Name, s); update != nil || unprotectedGroup || aws.ToInt32(existing.MinSize) != minSize ||
			aws.ToInt32(existing.MaxSize) < maxSize {
			if update == nil {
				update = launchedFrom(group.Name, s)
			}
			update.NewInstancesProtectedFromScaleIn = aws.Bool(true)
			update.MinSize = aws.Int32(min(minSize, aws.ToInt32(existing.DesiredCapacity)))
			update.MaxSize = aws.Int32(max(maxSize, aws.ToInt32(existing.DesiredCapacity)))
			if _, err := asg.UpdateAutoScalingGroup(ctx, update); err != nil {
				return drivers.GroupStatus{}, awscloud.Classify("updating Auto Scaling group "+group.Name, err)
			}
		}
		// The instances it launches are protected by now: those it has
		// next, so none is left that a scale-in could pick.
		if err := protect(ctx, asg, existing); err != nil {
			return drivers.GroupStatus{}, err
		}
		if want := inService(group.Replicas, existing); aws.ToInt32(existing.DesiredCapacity) < want {
			if _, err := asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
				AutoScalingGroupName: aws.String(group.Name), DesiredCapacity: aws.Int32(want), HonorCooldown: aws.Bool(false),
			}); err != nil {
				return drivers.GroupStatus{}, awscloud.Classify("raising the desired capacity of "+group.Name, err)
			}
		}
	}
	status, standby, err := groupStatus(ctx, asg, ec2c, group.Name)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	if status, err = d.lowerUnlaunched(ctx, asg, s.Region, group.Class.Credentials, group.Replicas, status, standby); err != nil {
		return drivers.GroupStatus{}, err
	}
	d.removeFormerGroupsQuietly(ctx, asg, s.Region, group.Class.Credentials, existing, owner)
	return d.withLaunchFailure(ctx, asg, group.Class.Credentials, status), nil
}

// launchedFrom is an update of the group that names what it launches from:
// the launch template, in the mixed-instances policy when the class has one.
func launchedFrom(name string, s *nodesetv1alpha1.EKSAutoscalingGroup) *autoscaling.UpdateAutoScalingGroupInput {
	update := &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String(name)}
	spec := &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String(name), Version: aws.String("$Latest")}
	if m := s.MixedInstances; m != nil {
		update.MixedInstancesPolicy = mixedInstances(spec, m)
		if m.SpotMaxPrice == "" {
			// Auto Scaling keeps a max price left out of an update; an
			// empty one removes it.
			update.MixedInstancesPolicy.InstancesDistribution.SpotMaxPrice = aws.String("")
		}
	} else {
		update.LaunchTemplate = spec
	}
	return update
}

// groupChanges is the update that brings the group's own settings in step
// with the class (what the launch template does not hold: the instance
// types and spot settings of a mixed-instances policy, the subnets,
// capacity rebalancing), or nil when they are.
func groupChanges(g *asgtypes.AutoScalingGroup, name string, s *nodesetv1alpha1.EKSAutoscalingGroup) *autoscaling.UpdateAutoScalingGroupInput {
	update, changed := launchedFrom(name, s), false
	if m, have := s.MixedInstances, g.MixedInstancesPolicy; m == nil {
		changed = have != nil
	} else if have == nil || have.LaunchTemplate == nil || have.InstancesDistribution == nil {
		changed = true
	} else {
		var types []string
		for _, o := range have.LaunchTemplate.Overrides {
			types = append(types, aws.ToString(o.InstanceType))
		}
		dist := have.InstancesDistribution
		// A setting the class leaves out is AWS's default, which the group
		// has unless it was set before.
		changed = !slices.Equal(types, m.InstanceTypes) ||
			orDefault(m.OnDemandBaseCapacity, defaultOnDemandBase) != orDefault(dist.OnDemandBaseCapacity, defaultOnDemandBase) ||
			orDefault(m.OnDemandPercentageAboveBaseCapacity, defaultOnDemandPercentage) != orDefault(dist.OnDemandPercentageAboveBaseCapacity, defaultOnDemandPercentage) ||
			spotAllocation(m.SpotAllocationStrategy) != spotAllocation(aws.ToString(dist.SpotAllocationStrategy)) ||
			m.SpotMaxPrice != aws.ToString(dist.SpotMaxPrice)
	}
	if !launchesFromLatest(g, name) {
		changed = true // pointed at another version, or another template, by hand
	}
	have := strings.Split(aws.ToString(g.VPCZoneIdentifier), ",")
	if want := slices.Sorted(slices.Values(s.SubnetIDs)); !slices.Equal(slices.Sorted(slices.Values(have)), want) {
		update.VPCZoneIdentifier, changed = aws.String(strings.Join(s.SubnetIDs, ",")), true
	}
	if s.CapacityRebalance != nil && *s.CapacityRebalance != aws.ToBool(g.CapacityRebalance) {
		update.CapacityRebalance, changed = s.CapacityRebalance, true
	}
	if !changed {
		return nil
	}
	return update
}

// launchesFromLatest reports whether the group launches from the $Latest
// version of its launch template, name, where each template hash has its
// version.
func launchesFromLatest(g *asgtypes.AutoScalingGroup, name string) bool {
	spec := g.LaunchTemplate
	if m := g.MixedInstancesPolicy; m != nil && m.LaunchTemplate != nil {
		spec = m.LaunchTemplate.LaunchTemplateSpecification
	}
	return spec != nil && aws.ToString(spec.LaunchTemplateName) == name && aws.ToString(spec.Version) == "$Latest"
}

// suspendRebalance suspends AZRebalance on the group: nodeset, not AWS,
// decides which instances go.
func suspendRebalance(ctx context.Context, asg awscloud.AutoScaling, name string) error {
	_, err := asg.SuspendProcesses(ctx, &autoscaling.SuspendProcessesInput{
		AutoScalingGroupName: aws.String(name), ScalingProcesses: []string{"AZRebalance"}})
	return awscloud.Classify("suspending AZRebalance on "+name, err)
}

// rebalanceSuspended reports whether AZRebalance is suspended on the group.
func rebalanceSuspended(g *asgtypes.AutoScalingGroup) bool {
	return slices.ContainsFunc(g.SuspendedProcesses, func(p asgtypes.SuspendedProcess) bool { return aws.ToString(p.ProcessName) == "AZRebalance" })
}

// DescribeGroup returns the group and its instances (those on standby
// among the running), or ErrNotFound.
func (d *Driver) DescribeGroup(ctx context.Context, class drivers.Class, name string) (_ drivers.GroupStatus, err error) {
	defer awscloud.Redact(class.Credentials, &err)
	_, asg, ec2c, err := d.connect(ctx, class, "")
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	status, _, err := groupStatus(ctx, asg, ec2c, name)
	return status, err
}

// TerminateMachine terminates one instance and lowers the desired capacity
// in the same call. An instance already gone is not an error; one that left
// the group but still runs is terminated through EC2. It is looked for in
// its own region (its providerID's zone's), which is not the class's when
// the class's region changed after it was launched.
func (d *Driver) TerminateMachine(ctx context.Context, class drivers.Class, group, providerID string) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, err := section(class)
	if err != nil {
		return err
	}
	if err := awscloud.CheckCredentials(class); err != nil {
		return err
	}
	region := awscloud.InstanceRegion(providerID, s.Region)
	// Recorded first: the old region's group is removed once empty.
	if err := d.recordFormerRegion(ctx, class, group, region); err != nil {
		return err
	}
	asg, ec2c, err := d.opts.Clients(ctx, region, class.Credentials)
	if err != nil {
		return err
	}
	defer d.invalidate(region, class.Credentials)
	_, err = awscloud.TerminateInGroup(ctx, asg, ec2c, group, providerID)
	return err
}

// DeleteGroup deletes the group with its instances, then the launch
// template: ErrInProgress until the group is gone.
func (d *Driver) DeleteGroup(ctx context.Context, class drivers.Class, name string) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, asg, ec2c, err := d.connect(ctx, class, "")
	if err != nil {
		return err
	}
	defer d.invalidate(s.Region, class.Credentials)
	d.mu.Lock()
	delete(d.templates, name)
	delete(d.hooks, name)
	delete(d.shortfalls, name)
	d.mu.Unlock()
	g, err := awscloud.FindGroup(ctx, asg, name)
	switch {
	case err == nil:
		// The groups of the class's former regions first: this group
		// keeps the record of them. Its Nodes are gone.
		if left, err := d.removeFormerGroups(ctx, asg, s.Region, class.Credentials, g, awscloud.OwnerFromTags(g.Tags), true); err != nil {
			return err
		} else if left {
			return fmt.Errorf("the Auto Scaling group %s of a former region is being deleted: %w", name, drivers.ErrInProgress)
		}
		if g.Status == nil { // not being deleted yet
			if err := unprotectForDeletion(ctx, asg, g); err != nil {
				return err
			}
			_, err := asg.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: aws.String(name), ForceDelete: aws.Bool(true)})
			if err != nil && !awscloud.IsCode(err, "ValidationError") {
				return awscloud.Classify("deleting Auto Scaling group "+name, err)
			}
			if _, err := awscloud.FindGroup(ctx, asg, name); errors.Is(err, drivers.ErrNotFound) {
				break // gone at once
			}
		}
		return fmt.Errorf("the Auto Scaling group %s is being deleted: %w", name, drivers.ErrInProgress)
	case !errors.Is(err, drivers.ErrNotFound):
		return err
	}
	_, err = ec2c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateName: aws.String(name), Versions: []string{"$Latest"}})
	if launchTemplateNotFound(err) {
		return nil
	}
	if err != nil {
		return awscloud.Classify("describing launch template "+name, err)
	}
	_, err = ec2c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: aws.String(name)})
	if err != nil && !launchTemplateNotFound(err) {
		return awscloud.Classify("deleting launch template "+name, err)
	}
	return nil
}

// ListGroups returns every group tagged with the cluster, in every scope of
// Options.Scopes, for orphan collection; it fails when any scope fails.
func (d *Driver) ListGroups(ctx context.Context) ([]drivers.GroupStatus, error) {
	if d.opts.Scopes == nil {
		return nil, errors.New("eks-asg: no regions to list groups in")
	}
	var out []drivers.GroupStatus
	for _, scope := range d.GroupScopes(ctx) {
		groups, err := d.ListGroupsIn(ctx, scope)
		if err != nil {
			return nil, err
		}
		out = append(out, groups...)
	}
	return out, nil
}

// scopeName names a scope in messages and in the orphan collector's calls:
// its region and classes, never its credentials.
func scopeName(scope Scope) string {
	if len(scope.Classes) > 0 {
		return scope.Region + " (NodeClass " + strings.Join(scope.Classes, ", ") + ")"
	}
	sum := sha256.Sum256(scope.Credentials[awscloud.CredentialAccessKeyID])
	return scope.Region + " (credentials " + hex.EncodeToString(sum[:4]) + ")"
}

// GroupScopes names the scopes orphan collection looks in, one by one.
func (d *Driver) GroupScopes(context.Context) []string {
	if d.opts.Scopes == nil {
		return nil
	}
	var out []string
	for _, scope := range d.opts.Scopes() {
		out = append(out, scopeName(scope))
	}
	return out
}

// scope is the scope named name, as Options.Scopes gives it now.
func (d *Driver) scope(name string) (Scope, error) {
	if d.opts.Scopes != nil {
		for _, scope := range d.opts.Scopes() {
			if scopeName(scope) == name {
				return scope, nil
			}
		}
	}
	return Scope{}, fmt.Errorf("eks-asg: no scope %s any more", name)
}

// ListGroupsIn returns every group tagged with the cluster in one scope; it
// fails rather than return a partial list.
func (d *Driver) ListGroupsIn(ctx context.Context, name string) (_ []drivers.GroupStatus, err error) {
	scope, err := d.scope(name)
	if err != nil {
		return nil, err
	}
	defer awscloud.Redact(scope.Credentials, &err)
	region := scope.Region
	asg, _, err := d.opts.Clients(ctx, region, scope.Credentials)
	if err != nil {
		return nil, err
	}
	var out []drivers.GroupStatus
	pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(asg, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters: []asgtypes.Filter{{Name: aws.String("tag:" + awscloud.TagCluster), Values: []string{d.opts.Cluster}}}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, awscloud.Classify("listing Auto Scaling groups in "+region, err)
		}
		for i := range page.AutoScalingGroups {
			g := &page.AutoScalingGroups[i]
			if awscloud.OwnerFromTags(g.Tags).Cluster != d.opts.Cluster {
				continue // the filter is a prefix match on some implementations
			}
			status := awscloud.StatusOf(aws.ToString(g.AutoScalingGroupName), g, nil)
			status.Class = scopeClass(scope)
			out = append(out, status)
		}
	}
	return out, nil
}

func scopeClass(scope Scope) drivers.Class {
	return drivers.Class{Credentials: scope.Credentials, Spec: nodesetv1alpha1.NodeClassSpec{
		Driver:         nodesetv1alpha1.DriverEKSASG,
		DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{Region: scope.Region}},
	}}
}

// ListStrayMachines returns the instances tagged with the cluster in one
// scope that no Auto Scaling group holds, for orphan collection; it fails
// rather than return a partial list.
func (d *Driver) ListStrayMachines(ctx context.Context, name string) (_ []drivers.MachineStatus, err error) {
	scope, err := d.scope(name)
	if err != nil {
		return nil, err
	}
	defer awscloud.Redact(scope.Credentials, &err)
	asg, ec2c, err := d.opts.Clients(ctx, scope.Region, scope.Credentials)
	if err != nil {
		return nil, err
	}
	return awscloud.StrayInstances(ctx, asg, ec2c, d.opts.Cluster)
}

// TerminateStrayMachine terminates an instance ListStrayMachines returned,
// through EC2; nil once it is shutting down or gone.
func (d *Driver) TerminateStrayMachine(ctx context.Context, name, providerID string) (err error) {
	scope, err := d.scope(name)
	if err != nil {
		return err
	}
	defer awscloud.Redact(scope.Credentials, &err)
	id, err := awscloud.InstanceID(providerID)
	if err != nil {
		return err
	}
	_, ec2c, err := d.opts.Clients(ctx, scope.Region, scope.Credentials)
	if err != nil {
		return err
	}
	defer d.invalidate(scope.Region, scope.Credentials)
	return awscloud.TerminateInstance(ctx, ec2c, id)
}

// Capacity is what one node of the class offers, from the instance type
// (the first of a mixed-instances list, the smallest a scale-up may get),
// with the labels of its architecture, type, region and zone
// (awscloud.TopologyLabels), and the ephemeral storage of its root volume:
// the class's block device for the image's root device, else the image's
// own (awscloud.WithEphemeralStorage; left out when neither says).
func (d *Driver) Capacity(ctx context.Context, class drivers.Class) (_ drivers.Capacity, err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, err := section(class)
	if err != nil {
		return drivers.Capacity{}, err
	}
	instanceType := s.InstanceType
	if instanceType == "" && s.MixedInstances != nil && len(s.MixedInstances.InstanceTypes) > 0 {
		instanceType = s.MixedInstances.InstanceTypes[0]
	}
	_, _, ec2c, err := d.connect(ctx, class, "")
	if err != nil {
		return drivers.Capacity{}, err
	}
	capacity, err := awscloud.InstanceTypeCapacity(ctx, ec2c, "spec.eksAutoscalingGroup.instanceType", s.Region, instanceType)
	if err != nil {
		return drivers.Capacity{}, err
	}
	topology, err := awscloud.TopologyLabels(ctx, ec2c, "spec.eksAutoscalingGroup.subnetIDs", s.Region, s.SubnetIDs)
	if err != nil {
		return drivers.Capacity{}, err
	}
	maps.Copy(capacity.Labels, topology)
	size, err := rootVolume(ctx, ec2c, s)
	if err != nil {
		return drivers.Capacity{}, err
	}
	if size > 0 {
		awscloud.WithEphemeralStorage(&capacity, size)
	}
	return capacity, nil
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func asgTags(group string, tags map[string]string) []asgtypes.Tag {
	out := make([]asgtypes.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, asgtypes.Tag{Key: aws.String(k), Value: aws.String(tags[k]), ResourceId: aws.String(group),
			ResourceType: aws.String("auto-scaling-group"), PropagateAtLaunch: aws.Bool(true)})
	}
	return out
}
