// Package eksasg is the eks-asg group driver: a NodeSet is one EC2 Auto
// Scaling group of self-managed EKS workers, launched from a launch template
// the driver keeps in step with the class. The group's desired capacity is
// only ever raised here; it goes down only when a chosen, drained instance is
// terminated with the decrement in the same call, so AWS never picks a
// victim.
package eksasg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// Tags the driver puts on every group, launch template and instance.
const (
	TagCluster      = "nodeset.dev/cluster"
	TagNamespace    = "nodeset.dev/nodeset-namespace"
	TagNodeSet      = "nodeset.dev/nodeset"
	TagNodeSetUID   = "nodeset.dev/nodeset-uid"
	TagTemplateHash = "nodeset.dev/template-hash"
)

// AutoScaling is the part of the Auto Scaling API the driver uses.
type AutoScaling interface {
	CreateAutoScalingGroup(context.Context, *autoscaling.CreateAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.CreateAutoScalingGroupOutput, error)
	UpdateAutoScalingGroup(context.Context, *autoscaling.UpdateAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.UpdateAutoScalingGroupOutput, error)
	DescribeAutoScalingGroups(context.Context, *autoscaling.DescribeAutoScalingGroupsInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
	SetDesiredCapacity(context.Context, *autoscaling.SetDesiredCapacityInput, ...func(*autoscaling.Options)) (*autoscaling.SetDesiredCapacityOutput, error)
	TerminateInstanceInAutoScalingGroup(context.Context, *autoscaling.TerminateInstanceInAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.TerminateInstanceInAutoScalingGroupOutput, error)
	DescribeAutoScalingInstances(context.Context, *autoscaling.DescribeAutoScalingInstancesInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error)
	DeleteAutoScalingGroup(context.Context, *autoscaling.DeleteAutoScalingGroupInput, ...func(*autoscaling.Options)) (*autoscaling.DeleteAutoScalingGroupOutput, error)
	SuspendProcesses(context.Context, *autoscaling.SuspendProcessesInput, ...func(*autoscaling.Options)) (*autoscaling.SuspendProcessesOutput, error)
}

// EC2 is the part of the EC2 API the driver uses.
type EC2 interface {
	CreateLaunchTemplate(context.Context, *ec2.CreateLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateOutput, error)
	CreateLaunchTemplateVersion(context.Context, *ec2.CreateLaunchTemplateVersionInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error)
	DescribeLaunchTemplateVersions(context.Context, *ec2.DescribeLaunchTemplateVersionsInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error)
	DeleteLaunchTemplate(context.Context, *ec2.DeleteLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeSecurityGroups(context.Context, *ec2.DescribeSecurityGroupsInput, ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
}

// Clients gives the API clients for a region and a class's credentials.
type Clients func(ctx context.Context, region string, credentials map[string][]byte) (AutoScaling, EC2, error)

// Options configure a Driver.
type Options struct {
	// Cluster is the name the node controller serves; it is part of every
	// name and tag, so two clusters in one account never see each other's
	// groups.
	Cluster string
	// Clients makes the API clients. Required.
	Clients Clients
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
}

// ClusterInfo is what the user data needs to join a node to its cluster.
type ClusterInfo struct {
	Endpoint, CertificateAuthority, ServiceCIDR string
}

// ClusterLookup returns the ClusterInfo of an EKS cluster.
type ClusterLookup func(ctx context.Context, region string, credentials map[string][]byte, cluster string) (ClusterInfo, error)

// Scope is a region and the credentials to look in it with.
type Scope struct {
	Region      string
	Credentials map[string][]byte
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
	return &Driver{opts: opts, views: map[viewKey]*view{}, templates: map[string]string{}, clusters: map[string]ClusterInfo{}}
}

// Name is the value of spec.driver the driver serves.
func (d *Driver) Name() string { return nodesetv1alpha1.DriverEKSASG }

func section(class drivers.Class) (*nodesetv1alpha1.EKSAutoscalingGroup, error) {
	return drivers.RequireSection(class.Spec.EKSAutoscalingGroup, "spec.eksAutoscalingGroup", nodesetv1alpha1.DriverEKSASG)
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
	return nil
}

// ValidateCloud checks with read-only calls that the image, the subnets and
// the security groups exist in the region and that the credentials work.
func (d *Driver) ValidateCloud(ctx context.Context, class drivers.Class) error {
	s, err := section(class)
	if err != nil {
		return err
	}
	_, ec2c, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	if err != nil {
		return err
	}
	images, err := ec2c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{s.ImageID}})
	if err != nil {
		return Classify("spec.eksAutoscalingGroup.imageID "+s.ImageID, err)
	}
	if len(images.Images) == 0 {
		return drivers.InvalidConfiguration("spec.eksAutoscalingGroup.imageID", "%s does not exist in %s", s.ImageID, s.Region)
	}
	return ValidateNetwork(ctx, ec2c, s.Region, "spec.eksAutoscalingGroup.subnetIDs", s.SubnetIDs,
		"spec.eksAutoscalingGroup.securityGroupIDs", s.SecurityGroupIDs)
}

// ValidateNetwork checks that the subnets and security groups exist; the
// fields name them in the messages.
func ValidateNetwork(ctx context.Context, ec2c EC2, region, subnetsField string, subnets []string, groupsField string, securityGroups []string) error {
	if len(subnets) > 0 {
		out, err := ec2c.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: subnets})
		if err != nil {
			return Classify(subnetsField+" "+strings.Join(subnets, ","), err)
		}
		if len(out.Subnets) != len(subnets) {
			return drivers.InvalidConfiguration(subnetsField, "%d of %d subnets exist in %s", len(out.Subnets), len(subnets), region)
		}
	}
	if len(securityGroups) > 0 {
		out, err := ec2c.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{GroupIds: securityGroups})
		if err != nil {
			return Classify(groupsField+" "+strings.Join(securityGroups, ","), err)
		}
		if len(out.SecurityGroups) != len(securityGroups) {
			return drivers.InvalidConfiguration(groupsField, "%d of %d security groups exist in %s", len(out.SecurityGroups), len(securityGroups), region)
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

func (d *Driver) tags(owner drivers.Owner, hash string, extra map[string]string) map[string]string {
	tags := map[string]string{}
	for k, v := range extra {
		tags[k] = v
	}
	tags[TagCluster] = d.opts.Cluster
	tags[TagNamespace] = owner.Namespace
	tags[TagNodeSet] = owner.Name
	tags[TagNodeSetUID] = string(owner.UID)
	if hash != "" {
		tags[TagTemplateHash] = hash
	}
	return tags
}

// EnsureGroup makes the launch template and the group, or brings them in
// step: a new template version when the template hash changed, the bounds,
// and the desired capacity raised (never lowered) to the replicas.
func (d *Driver) EnsureGroup(ctx context.Context, group drivers.Group) (drivers.GroupStatus, error) {
	s, err := section(group.Class)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	asg, ec2c, err := d.opts.Clients(ctx, s.Region, group.Class.Credentials)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	minSize, maxSize := group.MinReplicas, max(group.MaxReplicas, group.Replicas)
	// Most calls change nothing: answer them from the shared look at the
	// region's groups.
	if d.templateKnown(group.Name, group.TemplateHash) {
		v, err := d.view(ctx, asg, ec2c, s.Region, group.Class.Credentials)
		if err != nil {
			return drivers.GroupStatus{}, err
		}
		if g, ok := v.groups[group.Name]; ok && g.Status == nil && aws.ToInt32(g.MinSize) == minSize &&
			aws.ToInt32(g.MaxSize) >= maxSize && aws.ToInt32(g.DesiredCapacity) >= group.Replicas {
			return statusOf(group.Name, g, v.instances), nil
		}
	}
	defer d.invalidate(s.Region, group.Class.Credentials)
	if err := d.ensureLaunchTemplate(ctx, ec2c, group, s); err != nil {
		return drivers.GroupStatus{}, err
	}
	d.mu.Lock()
	d.templates[group.Name] = group.TemplateHash
	d.mu.Unlock()
	existing, err := describeGroup(ctx, asg, group.Name)
	if err != nil && !errors.Is(err, drivers.ErrNotFound) {
		return drivers.GroupStatus{}, err
	}
	if existing == nil {
		input := &autoscaling.CreateAutoScalingGroupInput{
			AutoScalingGroupName: aws.String(group.Name),
			MinSize:              aws.Int32(minSize),
			MaxSize:              aws.Int32(maxSize),
			DesiredCapacity:      aws.Int32(group.Replicas),
			VPCZoneIdentifier:    aws.String(strings.Join(s.SubnetIDs, ",")),
			CapacityRebalance:    s.CapacityRebalance,
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
		if _, err := asg.CreateAutoScalingGroup(ctx, input); err != nil && !IsCode(err, "AlreadyExists") {
			return drivers.GroupStatus{}, Classify("creating Auto Scaling group "+group.Name, err)
		}
		// nodeset, not AWS, decides which instances go.
		if _, err := asg.SuspendProcesses(ctx, &autoscaling.SuspendProcessesInput{
			AutoScalingGroupName: aws.String(group.Name), ScalingProcesses: []string{"AZRebalance"}}); err != nil {
			return drivers.GroupStatus{}, Classify("suspending AZRebalance on "+group.Name, err)
		}
	} else {
		if aws.ToInt32(existing.MinSize) != minSize || aws.ToInt32(existing.MaxSize) < maxSize {
			if _, err := asg.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{
				AutoScalingGroupName: aws.String(group.Name),
				MinSize:              aws.Int32(min(minSize, aws.ToInt32(existing.DesiredCapacity))),
				MaxSize:              aws.Int32(max(maxSize, aws.ToInt32(existing.DesiredCapacity))),
			}); err != nil {
				return drivers.GroupStatus{}, Classify("updating the bounds of "+group.Name, err)
			}
		}
		if aws.ToInt32(existing.DesiredCapacity) < group.Replicas {
			if _, err := asg.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
				AutoScalingGroupName: aws.String(group.Name), DesiredCapacity: aws.Int32(group.Replicas), HonorCooldown: aws.Bool(false),
			}); err != nil {
				return drivers.GroupStatus{}, Classify("raising the desired capacity of "+group.Name, err)
			}
		}
	}
	return d.describe(ctx, asg, ec2c, group.Name)
}

// ensureLaunchTemplate creates the template, or a new default version of it
// when the configuration changed (the version's description is the template
// hash).
func (d *Driver) ensureLaunchTemplate(ctx context.Context, ec2c EC2, group drivers.Group, s *nodesetv1alpha1.EKSAutoscalingGroup) error {
	s, err := d.withCluster(ctx, group.Class.Credentials, s)
	if err != nil {
		return err
	}
	data, err := launchTemplateData(group, s, d.tags(group.Owner, group.TemplateHash, nil))
	if err != nil {
		return err
	}
	versions, err := ec2c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateName: aws.String(group.Name), Versions: []string{"$Latest"}})
	switch {
	case launchTemplateNotFound(err):
		tags := d.tags(group.Owner, "", s.Tags)
		_, err := ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{
			LaunchTemplateName: aws.String(group.Name),
			VersionDescription: aws.String(group.TemplateHash),
			LaunchTemplateData: data,
			TagSpecifications:  []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeLaunchTemplate, Tags: ec2Tags(tags)}},
		})
		if IsCode(err, "InvalidLaunchTemplateName.AlreadyExistsException") {
			return nil
		}
		return Classify("creating launch template "+group.Name, err)
	case err != nil:
		return Classify("describing launch template "+group.Name, err)
	}
	if len(versions.LaunchTemplateVersions) > 0 && aws.ToString(versions.LaunchTemplateVersions[0].VersionDescription) == group.TemplateHash {
		return nil
	}
	_, err = ec2c.CreateLaunchTemplateVersion(ctx, &ec2.CreateLaunchTemplateVersionInput{
		LaunchTemplateName: aws.String(group.Name),
		VersionDescription: aws.String(group.TemplateHash),
		LaunchTemplateData: data,
	})
	return Classify("creating a launch template version of "+group.Name, err)
}

// withCluster returns s with the bootstrap endpoint, CA and service CIDR it
// leaves out looked up from EKS (once per cluster).
func (d *Driver) withCluster(ctx context.Context, credentials map[string][]byte, s *nodesetv1alpha1.EKSAutoscalingGroup) (*nodesetv1alpha1.EKSAutoscalingGroup, error) {
	b := s.Bootstrap
	if d.opts.Clusters == nil || (b != nil && b.APIServerEndpoint != "" && b.CertificateAuthority != "") {
		return s, nil
	}
	key := s.Region + "/" + s.ClusterName
	d.mu.Lock()
	info, ok := d.clusters[key]
	d.mu.Unlock()
	if !ok {
		var err error
		if info, err = d.opts.Clusters(ctx, s.Region, credentials, s.ClusterName); err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.clusters[key] = info
		d.mu.Unlock()
	}
	out := *s
	filled := nodesetv1alpha1.EKSBootstrap{}
	if b != nil {
		filled = *b
	}
	if filled.APIServerEndpoint == "" {
		filled.APIServerEndpoint = info.Endpoint
	}
	if filled.CertificateAuthority == "" {
		filled.CertificateAuthority = info.CertificateAuthority
	}
	if filled.ServiceCIDR == "" {
		filled.ServiceCIDR = info.ServiceCIDR
	}
	out.Bootstrap = &filled
	return &out, nil
}

func launchTemplateData(group drivers.Group, s *nodesetv1alpha1.EKSAutoscalingGroup, owner map[string]string) (*ec2types.RequestLaunchTemplateData, error) {
	userData, err := UserData(s, group.Labels, group.Taints)
	if err != nil {
		return nil, err
	}
	instanceTags := map[string]string{"kubernetes.io/cluster/" + s.ClusterName: "owned"}
	for k, v := range owner {
		instanceTags[k] = v
	}
	data := &ec2types.RequestLaunchTemplateData{
		ImageId:          aws.String(s.ImageID),
		SecurityGroupIds: s.SecurityGroupIDs,
		UserData:         aws.String(userData),
		TagSpecifications: []ec2types.LaunchTemplateTagSpecificationRequest{{
			ResourceType: ec2types.ResourceTypeInstance,
			Tags:         ec2Tags(instanceTags),
		}},
	}
	if s.InstanceType != "" {
		data.InstanceType = ec2types.InstanceType(s.InstanceType)
	}
	if s.InstanceProfile != "" {
		profile := &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String(s.InstanceProfile)}
		if strings.HasPrefix(s.InstanceProfile, "arn:") {
			profile = &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Arn: aws.String(s.InstanceProfile)}
		}
		data.IamInstanceProfile = profile
	}
	if s.KeyName != "" {
		data.KeyName = aws.String(s.KeyName)
	}
	for _, b := range s.BlockDevices {
		data.BlockDeviceMappings = append(data.BlockDeviceMappings, ec2types.LaunchTemplateBlockDeviceMappingRequest{
			DeviceName: aws.String(b.DeviceName),
			Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{
				VolumeSize: b.VolumeSize, VolumeType: ec2types.VolumeType(b.VolumeType), Iops: b.IOPS, Throughput: b.Throughput,
				Encrypted: b.Encrypted, KmsKeyId: optional(b.KMSKeyID), DeleteOnTermination: b.DeleteOnTermination,
			},
		})
	}
	if m := s.MetadataOptions; m != nil {
		data.MetadataOptions = &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{
			HttpTokens:              ec2types.LaunchTemplateHttpTokensState(m.HTTPTokens),
			HttpPutResponseHopLimit: m.HTTPPutResponseHopLimit,
			HttpEndpoint:            ec2types.LaunchTemplateInstanceMetadataEndpointState(m.HTTPEndpoint),
		}
	}
	return data, nil
}

func mixedInstances(spec *asgtypes.LaunchTemplateSpecification, m *nodesetv1alpha1.MixedInstancesPolicy) *asgtypes.MixedInstancesPolicy {
	policy := &asgtypes.MixedInstancesPolicy{
		LaunchTemplate: &asgtypes.LaunchTemplate{LaunchTemplateSpecification: spec},
		InstancesDistribution: &asgtypes.InstancesDistribution{
			OnDemandBaseCapacity:                m.OnDemandBaseCapacity,
			OnDemandPercentageAboveBaseCapacity: m.OnDemandPercentageAboveBaseCapacity,
			SpotAllocationStrategy:              optional(m.SpotAllocationStrategy),
			SpotMaxPrice:                        optional(m.SpotMaxPrice),
		},
	}
	for _, t := range m.InstanceTypes {
		policy.LaunchTemplate.Overrides = append(policy.LaunchTemplate.Overrides, asgtypes.LaunchTemplateOverrides{InstanceType: aws.String(t)})
	}
	return policy
}

// DescribeGroup returns the group and its instances, or ErrNotFound.
func (d *Driver) DescribeGroup(ctx context.Context, class drivers.Class, name string) (drivers.GroupStatus, error) {
	s, err := section(class)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	asg, ec2c, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	return d.describe(ctx, asg, ec2c, name)
}

func describeGroup(ctx context.Context, asg AutoScaling, name string) (*asgtypes.AutoScalingGroup, error) {
	out, err := asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	if err != nil {
		return nil, Classify("describing Auto Scaling group "+name, err)
	}
	for i := range out.AutoScalingGroups {
		if aws.ToString(out.AutoScalingGroups[i].AutoScalingGroupName) == name {
			return &out.AutoScalingGroups[i], nil
		}
	}
	return nil, fmt.Errorf("Auto Scaling group %s: %w", name, drivers.ErrNotFound)
}

// GroupInstances describes the Auto Scaling group name with its instances
// (names, launch times, template hashes), or ErrNotFound.
func GroupInstances(ctx context.Context, asg AutoScaling, ec2c EC2, name string) (drivers.GroupStatus, error) {
	return describe(ctx, asg, ec2c, name)
}

func (d *Driver) describe(ctx context.Context, asg AutoScaling, ec2c EC2, name string) (drivers.GroupStatus, error) {
	return describe(ctx, asg, ec2c, name)
}

func describe(ctx context.Context, asg AutoScaling, ec2c EC2, name string) (drivers.GroupStatus, error) {
	g, err := describeGroup(ctx, asg, name)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	instances, err := describeInstances(ctx, ec2c, []asgtypes.AutoScalingGroup{*g})
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	return statusOf(name, g, instances), nil
}

// describeInstances describes the instances of groups, 200 ids a call.
func describeInstances(ctx context.Context, ec2c EC2, groups []asgtypes.AutoScalingGroup) (map[string]ec2types.Instance, error) {
	var ids []string
	for _, g := range groups {
		for _, i := range g.Instances {
			ids = append(ids, aws.ToString(i.InstanceId))
		}
	}
	details := map[string]ec2types.Instance{}
	for chunk := range slices.Chunk(ids, 200) {
		pages := ec2.NewDescribeInstancesPaginator(ec2c, &ec2.DescribeInstancesInput{InstanceIds: chunk})
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

// statusOf is a group's status, with its instances' names, launch times
// and template hashes from details.
func statusOf(name string, g *asgtypes.AutoScalingGroup, details map[string]ec2types.Instance) drivers.GroupStatus {
	status := drivers.GroupStatus{Name: name, DesiredSize: aws.ToInt32(g.DesiredCapacity), State: "ACTIVE", Owner: ownerFromTags(g.Tags)}
	if g.Status != nil {
		status.State = aws.ToString(g.Status) // "Delete in progress"
	}
	if g.CreatedTime != nil {
		status.CreatedAt = g.CreatedTime.Unix()
	}
	for _, i := range g.Instances {
		id := aws.ToString(i.InstanceId)
		m := drivers.MachineStatus{ProviderID: ProviderID(aws.ToString(i.AvailabilityZone), id), Owner: status.Owner, State: machineState(i.LifecycleState)}
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

// viewKey names a region seen with one set of credentials.
type viewKey struct{ region, credentials string }

func keyOf(region string, credentials map[string][]byte) viewKey {
	return viewKey{region, string(credentials[CredentialAccessKeyID])}
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
}

// view returns a look at the region's groups no older than PollInterval and
// taken after the last change the driver made there.
func (d *Driver) view(ctx context.Context, asg AutoScaling, ec2c EC2, region string, credentials map[string][]byte) (*view, error) {
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
		Filters: []asgtypes.Filter{{Name: aws.String("tag:" + TagCluster), Values: []string{d.opts.Cluster}}}, MaxRecords: aws.Int32(100)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, Classify("describing the Auto Scaling groups in "+region, err)
		}
		all = append(all, page.AutoScalingGroups...)
	}
	instances, err := describeInstances(ctx, ec2c, all)
	if err != nil {
		return nil, err
	}
	groups := make(map[string]*asgtypes.AutoScalingGroup, len(all))
	for i := range all {
		if ownerFromTags(all[i].Tags).Cluster == d.opts.Cluster {
			groups[aws.ToString(all[i].AutoScalingGroupName)] = &all[i]
		}
	}
	v.groups, v.instances, v.taken, v.takenAt = groups, instances, taken, generation
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

func ownerFromTags(tags []asgtypes.TagDescription) drivers.Owner {
	var o drivers.Owner
	for _, t := range tags {
		switch aws.ToString(t.Key) {
		case TagCluster:
			o.Cluster = aws.ToString(t.Value)
		case TagNamespace:
			o.Namespace = aws.ToString(t.Value)
		case TagNodeSet:
			o.Name = aws.ToString(t.Value)
		case TagNodeSetUID:
			o.UID = typesUID(aws.ToString(t.Value))
		}
	}
	return o
}

// TerminateMachine terminates one instance and lowers the desired capacity
// in the same call. An instance already gone is not an error.
func (d *Driver) TerminateMachine(ctx context.Context, class drivers.Class, group, providerID string) error {
	s, err := section(class)
	if err != nil {
		return err
	}
	asg, _, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	if err != nil {
		return err
	}
	defer d.invalidate(s.Region, class.Credentials)
	_, err = TerminateInGroup(ctx, asg, group, providerID)
	return err
}

// TerminateInGroup terminates the instance of providerID in the Auto Scaling
// group and lowers the group's desired capacity in the same call. It
// terminates nothing, and reports false, when the instance is not in the
// group any more (terminated, or detached by someone).
func TerminateInGroup(ctx context.Context, asg AutoScaling, group, providerID string) (bool, error) {
	id, err := InstanceID(providerID)
	if err != nil {
		return false, err
	}
	found, err := asg.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return false, Classify("looking up "+id, err)
	}
	inGroup := false
	for _, i := range found.AutoScalingInstances {
		if aws.ToString(i.InstanceId) == id && aws.ToString(i.AutoScalingGroupName) == group {
			inGroup = !strings.HasPrefix(aws.ToString(i.LifecycleState), "Terminat")
		}
	}
	if !inGroup {
		return false, nil
	}
	_, err = asg.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(id), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	return err == nil, Classify("terminating "+id+" in "+group, err)
}

// DeleteGroup deletes the group with its instances, then the launch
// template: ErrInProgress until the group is gone.
func (d *Driver) DeleteGroup(ctx context.Context, class drivers.Class, name string) error {
	s, err := section(class)
	if err != nil {
		return err
	}
	asg, ec2c, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	if err != nil {
		return err
	}
	defer d.invalidate(s.Region, class.Credentials)
	d.mu.Lock()
	delete(d.templates, name)
	d.mu.Unlock()
	g, err := describeGroup(ctx, asg, name)
	switch {
	case err == nil:
		if g.Status == nil { // not being deleted yet
			_, err := asg.DeleteAutoScalingGroup(ctx, &autoscaling.DeleteAutoScalingGroupInput{AutoScalingGroupName: aws.String(name), ForceDelete: aws.Bool(true)})
			if err != nil && !IsCode(err, "ValidationError") {
				return Classify("deleting Auto Scaling group "+name, err)
			}
			if _, err := describeGroup(ctx, asg, name); errors.Is(err, drivers.ErrNotFound) {
				break // gone at once
			}
		}
		return fmt.Errorf("Auto Scaling group %s: %w", name, drivers.ErrInProgress)
	case !errors.Is(err, drivers.ErrNotFound):
		return err
	}
	_, err = ec2c.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{
		LaunchTemplateName: aws.String(name), Versions: []string{"$Latest"}})
	if launchTemplateNotFound(err) {
		return nil
	}
	if err != nil {
		return Classify("describing launch template "+name, err)
	}
	_, err = ec2c.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: aws.String(name)})
	if err != nil && !launchTemplateNotFound(err) {
		return Classify("deleting launch template "+name, err)
	}
	return nil
}

func launchTemplateNotFound(err error) bool {
	return IsCode(err, "InvalidLaunchTemplateName.NotFoundException") || IsCode(err, "InvalidLaunchTemplateId.NotFound")
}

// ListGroups returns every group tagged with the cluster, in every scope of
// Options.Scopes, for orphan collection.
func (d *Driver) ListGroups(ctx context.Context) ([]drivers.GroupStatus, error) {
	if d.opts.Scopes == nil {
		return nil, errors.New("eks-asg: no regions to list groups in")
	}
	var out []drivers.GroupStatus
	for _, scope := range d.opts.Scopes() {
		region := scope.Region
		asg, _, err := d.opts.Clients(ctx, region, scope.Credentials)
		if err != nil {
			return nil, err
		}
		pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(asg, &autoscaling.DescribeAutoScalingGroupsInput{
			Filters: []asgtypes.Filter{{Name: aws.String("tag:" + TagCluster), Values: []string{d.opts.Cluster}}}})
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				return nil, Classify("listing Auto Scaling groups in "+region, err)
			}
			for i := range page.AutoScalingGroups {
				g := &page.AutoScalingGroups[i]
				if ownerFromTags(g.Tags).Cluster != d.opts.Cluster {
					continue // the filter is a prefix match on some implementations
				}
				status := statusOf(aws.ToString(g.AutoScalingGroupName), g, nil)
				status.Class = drivers.Class{Credentials: scope.Credentials, Spec: nodesetv1alpha1.NodeClassSpec{
					Driver:         nodesetv1alpha1.DriverEKSASG,
					DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{Region: region}},
				}}
				out = append(out, status)
			}
		}
	}
	return out, nil
}

// Capacity is what one node of the class offers, from the instance type
// (the first of a mixed-instances list, the smallest a scale-up may get).
func (d *Driver) Capacity(ctx context.Context, class drivers.Class) (drivers.Capacity, error) {
	s, err := section(class)
	if err != nil {
		return drivers.Capacity{}, err
	}
	instanceType := s.InstanceType
	if instanceType == "" && s.MixedInstances != nil && len(s.MixedInstances.InstanceTypes) > 0 {
		instanceType = s.MixedInstances.InstanceTypes[0]
	}
	_, ec2c, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	if err != nil {
		return drivers.Capacity{}, err
	}
	return InstanceTypeCapacity(ctx, ec2c, "spec.eksAutoscalingGroup.instanceType", s.Region, instanceType)
}

// capacities caches instance types' capacities by region and type: they
// do not change.
var capacities sync.Map

// InstanceTypeCapacity is what a node of the instance type offers; an
// unknown type is an invalid configuration of field. Answers are cached for
// the life of the process.
func InstanceTypeCapacity(ctx context.Context, ec2c EC2, field, region, instanceType string) (drivers.Capacity, error) {
	key := region + "/" + instanceType
	if cached, ok := capacities.Load(key); ok {
		return copyCapacity(cached.(drivers.Capacity)), nil
	}
	capacity, err := describeInstanceType(ctx, ec2c, field, region, instanceType)
	if err != nil {
		return drivers.Capacity{}, err
	}
	capacities.Store(key, capacity)
	return copyCapacity(capacity), nil
}

// copyCapacity is a copy the caller may change.
func copyCapacity(c drivers.Capacity) drivers.Capacity {
	return drivers.Capacity{Resources: c.Resources.DeepCopy(), Allocatable: c.Allocatable.DeepCopy(),
		Labels: maps.Clone(c.Labels), Taints: slices.Clone(c.Taints)}
}

func describeInstanceType(ctx context.Context, ec2c EC2, field, region, instanceType string) (drivers.Capacity, error) {
	out, err := ec2c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{ec2types.InstanceType(instanceType)}})
	if err != nil {
		return drivers.Capacity{}, Classify("describing instance type "+instanceType, err)
	}
	if len(out.InstanceTypes) == 0 {
		return drivers.Capacity{}, drivers.InvalidConfiguration(field, "%q is not an EC2 instance type in %s", instanceType, region)
	}
	return capacityOf(out.InstanceTypes[0]), nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
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

func ec2Tags(tags map[string]string) []ec2types.Tag {
	out := make([]ec2types.Tag, 0, len(tags))
	for _, k := range sortedKeys(tags) {
		out = append(out, ec2types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	return out
}

// IsCode reports whether err is an AWS API error with this code.
func IsCode(err error, code string) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == code
}

// Classify wraps an AWS error in the driver error the controllers act on:
// throttling, capacity, and configuration or permission errors; others are
// transient.
func Classify(what string, err error) error {
	if err == nil {
		return nil
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return fmt.Errorf("%s: %w", what, err)
	}
	// The API's code and message, without the SDK's wrapping (request ids).
	said := apiErr.ErrorCode() + ": " + apiErr.ErrorMessage()
	switch code := apiErr.ErrorCode(); {
	case code == "Throttling" || code == "ThrottlingException" || code == "RequestLimitExceeded":
		return fmt.Errorf("%s: %w: %s", what, drivers.ErrThrottled, said)
	case code == "InsufficientInstanceCapacity" || code == "InsufficientCapacity" || code == "LimitExceeded":
		return fmt.Errorf("%s: %w: %s", what, drivers.ErrOutOfCapacity, said)
	case code == "ValidationError" || strings.HasPrefix(code, "InvalidParameter") || strings.HasPrefix(code, "InvalidAMIID") ||
		strings.HasPrefix(code, "InvalidSubnet") || strings.HasPrefix(code, "InvalidGroup") || code == "UnauthorizedOperation" ||
		code == "AccessDenied" || code == "AuthFailure" || code == "InvalidClientTokenId" || code == "SignatureDoesNotMatch":
		return fmt.Errorf("%s: %w: %s", what, drivers.ErrInvalidConfiguration, said)
	}
	return fmt.Errorf("%s: %w", what, err)
}
