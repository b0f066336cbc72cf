// Package eksmanaged is the eks-managed group driver: a NodeSet is one EKS
// managed node group. EKS launches the instances, and with the NodeSet's
// strategy Managed it also rolls them to a new version. Scale-down stays the
// NodeSet's choice: the chosen, drained instance is terminated in the node
// group's Auto Scaling group with the decrement, as for eks-asg.
package eksmanaged

import (
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
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
)

// defaultInstanceType is what EKS launches when a node group names none.
const defaultInstanceType = "t3.medium"

// EKS is the part of the EKS API the driver uses.
type EKS interface {
	CreateNodegroup(context.Context, *eks.CreateNodegroupInput, ...func(*eks.Options)) (*eks.CreateNodegroupOutput, error)
	DescribeNodegroup(context.Context, *eks.DescribeNodegroupInput, ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error)
	UpdateNodegroupConfig(context.Context, *eks.UpdateNodegroupConfigInput, ...func(*eks.Options)) (*eks.UpdateNodegroupConfigOutput, error)
	UpdateNodegroupVersion(context.Context, *eks.UpdateNodegroupVersionInput, ...func(*eks.Options)) (*eks.UpdateNodegroupVersionOutput, error)
	DescribeUpdate(context.Context, *eks.DescribeUpdateInput, ...func(*eks.Options)) (*eks.DescribeUpdateOutput, error)
	DeleteNodegroup(context.Context, *eks.DeleteNodegroupInput, ...func(*eks.Options)) (*eks.DeleteNodegroupOutput, error)
	ListNodegroups(context.Context, *eks.ListNodegroupsInput, ...func(*eks.Options)) (*eks.ListNodegroupsOutput, error)
	DescribeCluster(context.Context, *eks.DescribeClusterInput, ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
	TagResource(context.Context, *eks.TagResourceInput, ...func(*eks.Options)) (*eks.TagResourceOutput, error)
	UntagResource(context.Context, *eks.UntagResourceInput, ...func(*eks.Options)) (*eks.UntagResourceOutput, error)
}

// API is the clients of one region and set of credentials.
type API struct {
	EKS         EKS
	AutoScaling awscloud.AutoScaling
	EC2         awscloud.EC2
}

// Clients gives the API clients for a region and a class's credentials.
type Clients func(ctx context.Context, region string, credentials map[string][]byte) (API, error)

// SDKClients makes real API clients with the endpoint, rate limit, retries
// and call counting of c.
func SDKClients(c awscloud.SDKConfig) Clients {
	configs := awscloud.NewAWSConfigs(c)
	asgClients := awscloud.ClientsFrom(configs)
	var (
		mu   sync.Mutex
		eksc = map[*aws.Config]*eks.Client{}
	)
	return func(ctx context.Context, region string, credentials map[string][]byte) (API, error) {
		cfg, err := configs(ctx, region, credentials)
		if err != nil {
			return API{}, err
		}
		asg, ec2c, err := asgClients(ctx, region, credentials)
		if err != nil {
			return API{}, err
		}
		mu.Lock()
		defer mu.Unlock()
		client, ok := eksc[cfg]
		if !ok {
			client = eks.NewFromConfig(*cfg)
			eksc[cfg] = client
		}
		return API{EKS: client, AutoScaling: asg, EC2: ec2c}, nil
	}
}

// Scope is where ListGroups looks for node groups: a cluster in a region,
// with the credentials of a class there.
type Scope struct {
	Region, Cluster string
	Credentials     map[string][]byte
	// Classes are the NodeClasses the scope is made from, for messages.
	Classes []string
}

// Options configure a Driver.
type Options struct {
	// Cluster is the name the node controller serves (--cluster-name): part
	// of every node group's name and tags.
	Cluster string
	// Clients makes the API clients. Required.
	Clients Clients
	// Scopes are the clusters ListGroups looks in, for orphan collection.
	Scopes func() []Scope
	// Now is the clock of the backoff of failed configuration updates;
	// time.Now when nil.
	Now func() time.Time
}

// Driver serves NodeClasses with driver eks-managed.
type Driver struct {
	opts Options
	// asked is, per node group, the configuration update last asked and
	// the hash of the spec that asked it (configAsk), so that its failure
	// is recorded against that spec, not one edited while it ran.
	mu    sync.Mutex
	asked map[string]configAsk
}

var (
	_ drivers.GroupDriver    = (*Driver)(nil)
	_ drivers.CloudValidator = (*Driver)(nil)
)

// New returns the eks-managed driver.
func New(opts Options) *Driver {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Driver{opts: opts, asked: map[string]configAsk{}}
}

// Name is the value of spec.driver the driver serves.
func (d *Driver) Name() string { return nodesetv1alpha1.DriverEKSManaged }

// GroupName is the node group's name: EKS allows 63 characters.
func (d *Driver) GroupName(owner drivers.Owner) string { return drivers.GroupNameWithin(owner, 63) }

func section(class drivers.Class) (*nodesetv1alpha1.EKSManagedNodeGroup, error) {
	return drivers.RequireSection(class.Spec.EKSManagedNodeGroup, "spec.eksManagedNodeGroup", nodesetv1alpha1.DriverEKSManaged)
}

// Validate refuses what EKS would refuse, before any call: missing required
// fields, and fields a launch template replaces.
func (d *Driver) Validate(_ context.Context, class drivers.Class) error {
	s, err := section(class)
	if err != nil {
		return err
	}
	for _, f := range []struct{ field, value string }{
		{"spec.eksManagedNodeGroup.clusterName", s.ClusterName},
		{"spec.eksManagedNodeGroup.region", s.Region},
		{"spec.eksManagedNodeGroup.nodeRole", s.NodeRole},
	} {
		if f.value == "" {
			return drivers.InvalidConfiguration(f.field, "is required")
		}
	}
	if len(s.Subnets) == 0 {
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.subnets", "needs at least one subnet")
	}
	if s.LaunchTemplate != nil {
		switch {
		case s.DiskSize != nil:
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.diskSize", "cannot be set with launchTemplate: set the volume size in the launch template")
		case s.RemoteAccess != nil:
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.remoteAccess", "cannot be set with launchTemplate: set the key pair and security groups in the launch template")
		}
	}
	if s.CapacityType == "CAPACITY_BLOCK" && s.LaunchTemplate == nil {
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.capacityType", "CAPACITY_BLOCK needs a launchTemplate that names the capacity reservation")
	}
	if s.ReleaseVersion != "" && s.Version == "" {
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.releaseVersion", "needs version (the Kubernetes version it is a release of)")
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if why := eksRefusesLabel(k, s.Labels[k]); why != "" {
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.labels["+k+"]",
				"%s (set such a label in the NodeClass's nodeTemplate: nodeset puts it on the Nodes)", why)
		}
	}
	if len(s.Taints) > eksMaxTaints {
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.taints", "EKS allows at most %d taints on a node group, and there are %d", eksMaxTaints, len(s.Taints))
	}
	for i, t := range s.Taints {
		field := fmt.Sprintf("spec.eksManagedNodeGroup.taints[%d]", i)
		switch {
		case t.Key == "":
			return drivers.InvalidConfiguration(field+".key", "is required")
		case len(t.Key) > eksMaxTaintKey:
			return drivers.InvalidConfiguration(field+".key",
				"EKS refuses node group taint keys longer than %d characters, prefix included (set such a taint in the NodeClass's nodeTemplate: nodeset puts it on the Nodes)", eksMaxTaintKey)
		case len(t.Value) > eksMaxTaintValue:
			return drivers.InvalidConfiguration(field+".value", "EKS refuses node group taint values longer than %d characters", eksMaxTaintValue)
		}
		switch ekstypes.TaintEffect(t.Effect) {
		case ekstypes.TaintEffectNoSchedule, ekstypes.TaintEffectNoExecute, ekstypes.TaintEffectPreferNoSchedule:
		default:
			return drivers.InvalidConfiguration(field+".effect", "must be NO_SCHEDULE, NO_EXECUTE or PREFER_NO_SCHEDULE")
		}
	}
	if u := s.UpdateConfig; u != nil {
		switch {
		case (u.MaxUnavailable == nil) == (u.MaxUnavailablePercentage == nil):
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.updateConfig", "set exactly one of maxUnavailable and maxUnavailablePercentage")
		case u.MaxUnavailable != nil && (*u.MaxUnavailable < 1 || *u.MaxUnavailable > eksMaxUnavailable):
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.updateConfig.maxUnavailable", "EKS allows 1 to %d nodes", eksMaxUnavailable)
		case u.MaxUnavailablePercentage != nil && (*u.MaxUnavailablePercentage < 1 || *u.MaxUnavailablePercentage > 100):
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.updateConfig.maxUnavailablePercentage", "EKS allows 1 to 100 percent")
		}
	}
	if d := s.DiskSize; d != nil && (*d < 1 || *d > eksMaxDiskSize) {
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.diskSize", "must be 1 to %d GiB, the sizes of the gp2 and gp3 EBS volumes EKS gives a node group", eksMaxDiskSize)
	}
	switch c := s.CapacityType; c {
	case "", "ON_DEMAND", "SPOT", "CAPACITY_BLOCK":
	default:
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.capacityType", "must be ON_DEMAND, SPOT or CAPACITY_BLOCK")
	}
	if lt := s.LaunchTemplate; lt != nil {
		switch {
		case (lt.ID == "") == (lt.Name == ""):
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.launchTemplate", "set exactly one of id and name")
		case lt.Name != "" && (len(lt.Name) < ec2MinTemplateName || len(lt.Name) > ec2MaxTemplateName ||
			strings.Trim(lt.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789().-/_") != ""):
			return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.launchTemplate.name",
				"EC2 allows launch template names of %d to %d letters, digits and ( ) . - / _", ec2MinTemplateName, ec2MaxTemplateName)
		}
	}
	return awscloud.ValidateTags("spec.eksManagedNodeGroup.tags", s.Tags)
}

// ValidateCloud checks with read-only calls that the credentials Secret
// has its keys, that the region, the cluster, the instance types and the
// subnets exist and that the credentials work.
func (d *Driver) ValidateCloud(ctx context.Context, class drivers.Class) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, api, err := d.connect(ctx, class)
	if err != nil {
		return err
	}
	var once []func(*eks.Options)
	if !awscloud.KnownRegion(s.Region) {
		// A region the SDK does not know: one try tells whether it answers.
		once = append(once, func(o *eks.Options) { o.RetryMaxAttempts = 1 })
	}
	_, err = api.EKS.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(s.ClusterName)}, once...)
	if awscloud.IsCode(err, "ResourceNotFoundException") {
		return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.clusterName", "EKS cluster %s does not exist in %s", s.ClusterName, s.Region)
	}
	if err != nil {
		if regionErr := awscloud.RegionError("spec.eksManagedNodeGroup.region", s.Region, err); regionErr != nil {
			return regionErr
		}
		return classify("describing EKS cluster "+s.ClusterName, err)
	}
	archs, err := awscloud.InstanceTypeArchitectures(ctx, api.EC2, "spec.eksManagedNodeGroup.instanceTypes", s.Region, s.InstanceTypes)
	if err != nil {
		return err
	}
	if s.LaunchTemplate == nil { // a launch template may name an AMI of its own, of either architecture
		want := amiArchitecture(s.AMIType)
		why := "amiType " + s.AMIType + " is " + want + ": EKS refuses the node group"
		if s.AMIType == "" {
			why = "without amiType EKS uses an x86_64 one: EKS refuses the node group (set amiType, such as AL2023_ARM_64_STANDARD)"
		}
		for _, t := range s.InstanceTypes {
			if other := awscloud.OtherArchitecture(t, archs[t], want); other != "" {
				return drivers.InvalidConfiguration("spec.eksManagedNodeGroup.instanceTypes", "%s, and %s", other, why)
			}
		}
	}
	var securityGroups []string
	if s.RemoteAccess != nil {
		securityGroups = s.RemoteAccess.SourceSecurityGroups
	}
	return awscloud.ValidateNetwork(ctx, api.EC2, s.Region, "spec.eksManagedNodeGroup.subnets", s.Subnets,
		"spec.eksManagedNodeGroup.remoteAccess.sourceSecurityGroups", securityGroups)
}

// amiArchitecture is the EC2 architecture of an EKS AMI type (x86_64 for
// none: EKS's default is an x86_64 one), or "" when the AMI type does not
// say (CUSTOM).
func amiArchitecture(amiType string) string {
	switch {
	case amiType == "", strings.Contains(amiType, "x86_64"):
		return "x86_64"
	case strings.Contains(amiType, "ARM_64"):
		return "arm64"
	}
	return ""
}

// Capacity is what a node of the first instance type offers, with the
// labels of its architecture, type, region and zone
// (awscloud.TopologyLabels), the class's labels and taints, and the
// ephemeral storage of its root volume where nodeset knows it
// (rootVolume).
func (d *Driver) Capacity(ctx context.Context, class drivers.Class) (_ drivers.Capacity, err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, err := section(class)
	if err != nil {
		return drivers.Capacity{}, err
	}
	instanceType := defaultInstanceType
	if len(s.InstanceTypes) > 0 {
		instanceType = s.InstanceTypes[0]
	}
	_, api, err := d.connect(ctx, class)
	if err != nil {
		return drivers.Capacity{}, err
	}
	capacity, err := awscloud.InstanceTypeCapacity(ctx, api.EC2, "spec.eksManagedNodeGroup.instanceTypes[0]", s.Region, instanceType)
	if err != nil {
		return drivers.Capacity{}, err
	}
	topology, err := awscloud.TopologyLabels(ctx, api.EC2, "spec.eksManagedNodeGroup.subnets", s.Region, s.Subnets)
	if err != nil {
		return drivers.Capacity{}, err
	}
	if capacity.Labels == nil {
		capacity.Labels = map[string]string{}
	}
	maps.Copy(capacity.Labels, topology)
	for k, v := range s.Labels {
		capacity.Labels[k] = v
	}
	for _, t := range s.Taints {
		capacity.Taints = append(capacity.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: kubeEffect(t.Effect)})
	}
	if s.CapacityType != "" {
		capacity.Labels["eks.amazonaws.com/capacityType"] = s.CapacityType
	}
	size, known, err := rootVolume(ctx, api.EC2, class.Credentials, s)
	if err != nil {
		return drivers.Capacity{}, err
	}
	if known {
		awscloud.WithEphemeralStorage(&capacity, size)
	}
	return capacity, nil
}

// EnsureGroup creates the node group, or brings it in step:
//   - the desired size raised to the replicas (never lowered), the bounds,
//     labels, taints and update config through UpdateNodegroupConfig;
//   - version, release version or launch template version through
//     UpdateNodegroupVersion, only when the NodeSet's strategy is Managed;
//   - an update in progress (group.UpdateID, or the one it starts, of the
//     version or of the configuration) tracked with DescribeUpdate. Nothing
//     else is changed while the group is not ACTIVE or DEGRADED, or while an
//     update runs: EKS refuses it. A configuration update that failed is
//     said, with its errors, and the same change asked again only after a
//     growing backoff (configbackoff.go); a changed spec is asked at once.
func (d *Driver) EnsureGroup(ctx context.Context, group drivers.Group) (_ drivers.GroupStatus, err error) {
	defer awscloud.Redact(group.Class.Credentials, &err)
	s, err := section(group.Class)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	if err := d.Validate(ctx, group.Class); err != nil {
		return drivers.GroupStatus{}, err
	}
	if n := len(taints(s, group)); n > eksMaxTaints {
		return drivers.GroupStatus{}, drivers.InvalidConfiguration("taints",
			"EKS allows at most %d taints on a node group, and the class's eksManagedNodeGroup.taints with the NodeSet's Node taints make %d", eksMaxTaints, n)
	}
	_, api, err := d.connect(ctx, group.Class)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	ng, err := describe(ctx, api.EKS, s.ClusterName, group.Name)
	if errors.Is(err, drivers.ErrNotFound) {
		minSize, maxSize := bounds(group, group.Replicas)
		input := &eks.CreateNodegroupInput{
			ClusterName:        aws.String(s.ClusterName),
			NodegroupName:      aws.String(group.Name),
			NodeRole:           aws.String(s.NodeRole),
			Subnets:            s.Subnets,
			InstanceTypes:      s.InstanceTypes,
			AmiType:            ekstypes.AMITypes(s.AMIType),
			CapacityType:       ekstypes.CapacityTypes(s.CapacityType),
			DiskSize:           s.DiskSize,
			Version:            optional(s.Version),
			ReleaseVersion:     optional(s.ReleaseVersion),
			LaunchTemplate:     launchTemplate(s.LaunchTemplate),
			UpdateConfig:       updateConfig(s.UpdateConfig),
			Labels:             labels(s, group),
			Taints:             taints(s, group),
			Tags:               d.tags(group.Owner, group.TemplateHash, s.Tags),
			ScalingConfig:      &ekstypes.NodegroupScalingConfig{MinSize: aws.Int32(minSize), MaxSize: aws.Int32(maxSize), DesiredSize: aws.Int32(group.Replicas)},
			ClientRequestToken: aws.String(token(group)),
		}
		if r := s.RemoteAccess; r != nil {
			input.RemoteAccess = &ekstypes.RemoteAccessConfig{Ec2SshKey: optional(r.EC2SSHKey), SourceSecurityGroups: r.SourceSecurityGroups}
		}
		out, err := api.EKS.CreateNodegroup(ctx, input)
		if err != nil && !awscloud.IsCode(err, "ResourceInUseException") {
			return drivers.GroupStatus{}, classify("creating node group "+group.Name, err)
		}
		if err == nil && out.Nodegroup != nil {
			return d.status(ctx, api, out.Nodegroup, nil)
		}
		// Made meanwhile: by an earlier call of ours, or by someone else.
		if ng, err = describe(ctx, api.EKS, s.ClusterName, group.Name); err != nil {
			return drivers.GroupStatus{}, err
		}
		if err := d.checkOwner(ng, group.Owner); err != nil {
			return drivers.GroupStatus{}, err
		}
		return d.status(ctx, api, ng, nil)
	}
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	if err := d.checkOwner(ng, group.Owner); err != nil {
		return drivers.GroupStatus{}, err
	}
	d.removeFormerGroupsQuietly(ctx, api, s, group.Class.Credentials, ng, group.Owner)
	if ng.Status == ekstypes.NodegroupStatusCreateFailed {
		return d.remakeFailed(ctx, api, s, ng, group)
	}

	var update *ekstypes.Update
	if group.UpdateID != "" {
		update, err = describeUpdate(ctx, api.EKS, s.ClusterName, group.Name, group.UpdateID)
		if err != nil && !errors.Is(err, drivers.ErrNotFound) {
			return drivers.GroupStatus{}, err
		}
	}
	settled := (ng.Status == ekstypes.NodegroupStatusActive || ng.Status == ekstypes.NodegroupStatusDegraded) &&
		(update == nil || update.Status != ekstypes.UpdateStatusInProgress)
	if !settled {
		return d.status(ctx, api, ng, update)
	}
	askKey, specHash := s.Region+"/"+s.ClusterName+"/"+group.Name, configSpecHash(s, group)
	if update != nil && update.Type == ekstypes.UpdateTypeConfigUpdate &&
		(update.Status == ekstypes.UpdateStatusFailed || update.Status == ekstypes.UpdateStatusCancelled) {
		// A configuration update of ours EKS gave up on is said, with its
		// errors, and recorded on the node group: the same change is asked
		// again only after a backoff that grows with each failure.
		record, err := d.recordFailedConfig(ctx, api, ng, update, d.askedHash(askKey, aws.ToString(update.Id), specHash))
		if err != nil {
			return drivers.GroupStatus{}, err
		}
		status, err := d.status(ctx, api, ng, update)
		status.Message = joinMessages(status.Message, record.retryMessage())
		return status, err
	}
	if version := versionChanges(ng, s); version != nil && failedBefore(update, version) {
		// Recorded now: the configuration change below, which waited for
		// the update's end, answers without it, and the next look no
		// longer has its id from the NodeSet's status.
		if err := d.recordFailedUpdate(ctx, api, ng, aws.ToString(update.Id)); err != nil {
			return drivers.GroupStatus{}, err
		}
	}
	if sc := ng.ScalingConfig; sc != nil && aws.ToInt32(sc.DesiredSize) < group.Replicas {
		// Instances on standby are among the replicas, not in the
		// desired size: raised for them, the node group would launch
		// their replacements.
		standby, err := standbyCount(ctx, api, ng)
		if err != nil {
			return drivers.GroupStatus{}, err
		}
		group.Replicas = max(0, group.Replicas-standby)
	}
	if config := configChanges(ng, s, group); config != nil {
		if record, ok := parseFailedConfig(ng.Tags[failedConfigTag]); ok && record.hash == specHash && d.opts.Now().Before(record.retryAt()) {
			// The same change failed a moment ago: asked again now it
			// would most likely fail the same way. It waits for its
			// backoff, or for a change of the spec that asks it.
			last, err := describeUpdate(ctx, api.EKS, s.ClusterName, group.Name, record.id)
			if err != nil && !errors.Is(err, drivers.ErrNotFound) {
				return drivers.GroupStatus{}, err
			}
			status, err := d.status(ctx, api, ng, last)
			status.Message = joinMessages(status.Message, record.retryMessage())
			return status, err
		}
		config.ClusterName, config.NodegroupName = aws.String(s.ClusterName), aws.String(group.Name)
		out, err := api.EKS.UpdateNodegroupConfig(ctx, config)
		if awscloud.IsCode(err, "ResourceInUseException") {
			return d.status(ctx, api, ng, update) // another update runs: this one waits for it
		}
		if err := goneMeanwhile("updating node group "+group.Name, err); err != nil {
			return drivers.GroupStatus{}, err
		}
		if err != nil {
			return drivers.GroupStatus{}, classify("updating node group "+group.Name, err)
		}
		after, err := describe(ctx, api.EKS, s.ClusterName, group.Name)
		if err != nil {
			return drivers.GroupStatus{}, err
		}
		if u := out.Update; u != nil && u.Status != ekstypes.UpdateStatusSuccessful {
			// Tracked as a version update is: while it runs EKS takes no
			// other, and should it fail, its errors are said.
			update = u
			d.remember(askKey, configAsk{id: aws.ToString(u.Id), hash: specHash})
		}
		return d.status(ctx, api, after, update) // else the update tracked still reported: the NodeSet's status keeps it
	}
	// The configuration is in step: a failure recorded before is over.
	if err := d.forgetFailedConfig(ctx, api, ng); err != nil {
		return drivers.GroupStatus{}, err
	}
	if version := versionChanges(ng, s); version != nil {
		if !group.ManagedRollout {
			status, err := d.status(ctx, api, ng, update)
			status.Message = joinMessages(status.Message, "the version, release version or launch template changed; "+
				"EKS applies such changes only with the NodeSet's strategy Managed")
			return status, err
		}
		// The update the NodeSet's status tracks, or else the version
		// update that last failed, which the status no longer names.
		last := update
		if id := ng.Tags[failedUpdateTag]; last == nil && id != "" {
			if last, err = describeUpdate(ctx, api.EKS, s.ClusterName, group.Name, id); err != nil && !errors.Is(err, drivers.ErrNotFound) {
				return drivers.GroupStatus{}, err
			}
		}
		if failedBefore(last, version) {
			// Started again it would fail the same way, surging and
			// draining the group each time: it waits for a change.
			if err := d.recordFailedUpdate(ctx, api, ng, aws.ToString(last.Id)); err != nil {
				return drivers.GroupStatus{}, err
			}
			status, err := d.status(ctx, api, ng, last)
			status.Message = joinMessages(status.Message, "it is not started again until the version, release version or launch template "+
				"version changes, or the node group's tag "+failedUpdateTag+" is removed")
			return status, err
		}
		version.ClusterName, version.NodegroupName = aws.String(s.ClusterName), aws.String(group.Name)
		version.ClientRequestToken = aws.String(versionToken(group, ng))
		out, err := api.EKS.UpdateNodegroupVersion(ctx, version)
		if awscloud.IsCode(err, "ResourceInUseException") {
			return d.status(ctx, api, ng, update) // another update runs: this one waits for it
		}
		if err := goneMeanwhile("updating the version of node group "+group.Name, err); err != nil {
			return drivers.GroupStatus{}, err
		}
		if err != nil {
			return drivers.GroupStatus{}, classify("updating the version of node group "+group.Name, err)
		}
		update = out.Update
		return d.status(ctx, api, ng, update)
	}
	if err := d.tagTemplateHash(ctx, api, ng, group.TemplateHash); err != nil {
		return drivers.GroupStatus{}, err
	}
	if err := d.recordFailedUpdate(ctx, api, ng, ""); err != nil {
		return drivers.GroupStatus{}, err
	}
	return d.status(ctx, api, ng, update)
}

// remakeFailed answers for a node group whose creation failed, which EKS
// can neither update nor bring back to ACTIVE: once the NodeSet's template
// differs from the one it was made with (its template-hash tag), a class
// or set edit that may fix the cause (a subnet, the node role, the
// instance types), it is deleted, and the next sync makes it again with
// the template. Made with the current template, it is left as it is, with
// its health issues: made again it would most likely fail the same way.
func (d *Driver) remakeFailed(ctx context.Context, api API, s *nodesetv1alpha1.EKSManagedNodeGroup, ng *ekstypes.Nodegroup, group drivers.Group) (drivers.GroupStatus, error) {
	status, err := d.status(ctx, api, ng, nil)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	name := aws.ToString(ng.NodegroupName)
	if made := ng.Tags[awscloud.TagTemplateHash]; group.TemplateHash == "" || made == group.TemplateHash {
		status.Message = joinMessages(status.Message, "EKS cannot change a node group whose creation failed: it is deleted and made again "+
			"once the NodeClass or the NodeSet's template changes, or once you delete it")
		return status, nil
	}
	_, err = api.EKS.DeleteNodegroup(ctx, &eks.DeleteNodegroupInput{ClusterName: aws.String(s.ClusterName), NodegroupName: ng.NodegroupName})
	if err != nil && !awscloud.IsCode(err, "ResourceNotFoundException") && !awscloud.IsCode(err, "ResourceInUseException") {
		return drivers.GroupStatus{}, classify("deleting node group "+name+", whose creation failed", err)
	}
	status.Message = joinMessages(status.Message, "its creation failed, and the template changed since: it is deleted, to be made again")
	return status, nil
}

// checkOwner refuses a node group whose tags name another owner than the
// driver's cluster and owner's NodeSet (awscloud.CheckOwner).
func (d *Driver) checkOwner(ng *ekstypes.Nodegroup, owner drivers.Owner) error {
	owner.Cluster = d.opts.Cluster // what the driver tags its node groups with
	return awscloud.CheckOwner("node group", aws.ToString(ng.NodegroupName), awscloud.OwnerFromTagMap(ng.Tags), owner)
}

// tagTemplateHash records on the node group the template hash its
// configuration is now in step with.
func (d *Driver) tagTemplateHash(ctx context.Context, api API, ng *ekstypes.Nodegroup, hash string) error {
	if hash == "" || ng.Tags[awscloud.TagTemplateHash] == hash || ng.NodegroupArn == nil {
		return nil
	}
	_, err := api.EKS.TagResource(ctx, &eks.TagResourceInput{ResourceArn: ng.NodegroupArn, Tags: map[string]string{awscloud.TagTemplateHash: hash}})
	what := "tagging node group " + aws.ToString(ng.NodegroupName) + " with its template hash"
	if awscloud.IsCode(err, "ResourceNotFoundException") {
		// The group went since it was described: nothing is said of the
		// template, and the next sync finds the group gone.
		return awscloud.Classify(what, err)
	}
	if err != nil {
		return classify(what, err)
	}
	if ng.Tags == nil {
		ng.Tags = map[string]string{}
	}
	ng.Tags[awscloud.TagTemplateHash] = hash
	return nil
}

func describe(ctx context.Context, api EKS, cluster, name string) (*ekstypes.Nodegroup, error) {
	out, err := api.DescribeNodegroup(ctx, &eks.DescribeNodegroupInput{ClusterName: aws.String(cluster), NodegroupName: aws.String(name)})
	if awscloud.IsCode(err, "ResourceNotFoundException") {
		return nil, fmt.Errorf("node group %s: %w", name, drivers.ErrNotFound)
	}
	if err != nil {
		return nil, classify("describing node group "+name, err)
	}
	return out.Nodegroup, nil
}

func describeUpdate(ctx context.Context, api EKS, cluster, name, id string) (*ekstypes.Update, error) {
	out, err := api.DescribeUpdate(ctx, &eks.DescribeUpdateInput{Name: aws.String(cluster), NodegroupName: aws.String(name), UpdateId: aws.String(id)})
	if awscloud.IsCode(err, "ResourceNotFoundException") {
		return nil, fmt.Errorf("update %s of node group %s: %w", id, name, drivers.ErrNotFound)
	}
	if err != nil {
		return nil, classify("describing update "+id+" of node group "+name, err)
	}
	return out.Update, nil
}

// status is the node group's status: its state, health issues, the update
// tracked, and the instances of the Auto Scaling group behind it.
func (d *Driver) status(ctx context.Context, api API, ng *ekstypes.Nodegroup, update *ekstypes.Update) (drivers.GroupStatus, error) {
	status := drivers.GroupStatus{Name: aws.ToString(ng.NodegroupName), State: string(ng.Status), Owner: awscloud.OwnerFromTagMap(ng.Tags),
		TemplateHash: ng.Tags[awscloud.TagTemplateHash]}
	if ng.ScalingConfig != nil {
		status.DesiredSize = aws.ToInt32(ng.ScalingConfig.DesiredSize)
	}
	if ng.CreatedAt != nil {
		status.CreatedAt = ng.CreatedAt.Unix()
	}
	status.Message = healthIssues(ng)
	if update != nil {
		status.UpdateID, status.UpdateStatus = aws.ToString(update.Id), string(update.Status)
		if update.Status == ekstypes.UpdateStatusFailed {
			var errs []string
			for _, e := range update.Errors {
				errs = append(errs, fmt.Sprintf("%s: %s", e.ErrorCode, aws.ToString(e.ErrorMessage)))
			}
			status.Message = joinMessages(status.Message, "update "+status.UpdateID+" failed: "+strings.Join(errs, "; "))
		}
		if update.Status == ekstypes.UpdateStatusCancelled {
			status.Message = joinMessages(status.Message, "update "+status.UpdateID+" was cancelled")
		}
	}
	if asg := autoScalingGroup(ng); asg != "" {
		g, err := awscloud.FindGroup(ctx, api.AutoScaling, asg)
		switch {
		case errors.Is(err, drivers.ErrNotFound):
		case err != nil:
			return drivers.GroupStatus{}, err
		default:
			details, err := awscloud.DescribeInstances(ctx, api.EC2, []asgtypes.AutoScalingGroup{*g})
			if err != nil {
				return drivers.GroupStatus{}, err
			}
			labels, taints, standby := nodegroupLabels(ng), nodegroupTaints(ng), awscloud.OnStandby(g)
			for _, m := range awscloud.StatusOf(asg, g, details).Machines {
				if id, err := awscloud.InstanceID(m.ProviderID); err == nil && standby[id] && m.State == drivers.MachineStopping {
					m.State = drivers.MachineRunning // kept: standby.go
				}
				m.Owner = status.Owner
				m.TemplateHash = "" // EKS's launch template, not a nodeset one
				// What EKS's bootstrap passes the kubelet, which applies
				// it only to a Node it creates: nodeset's Node carries it.
				if m.Labels == nil {
					m.Labels = map[string]string{}
				}
				maps.Copy(m.Labels, labels)
				if id, err := awscloud.InstanceID(m.ProviderID); err == nil && details[id].ImageId != nil {
					m.Labels["eks.amazonaws.com/nodegroup-image"] = aws.ToString(details[id].ImageId)
				}
				m.Taints = taints
				status.Machines = append(status.Machines, m)
			}
		}
	}
	return status, nil
}

// healthIssues are the node group's health issues (code, message and
// resources), or "".
func healthIssues(ng *ekstypes.Nodegroup) string {
	if ng.Health == nil {
		return ""
	}
	var issues []string
	for _, i := range ng.Health.Issues {
		issue := fmt.Sprintf("%s: %s", i.Code, aws.ToString(i.Message))
		if len(i.ResourceIds) > 0 {
			issue += " (" + strings.Join(i.ResourceIds, ", ") + ")"
		}
		issues = append(issues, issue)
	}
	return strings.Join(issues, "; ")
}

// nodegroupLabels are the labels EKS gives every Node of a node group: its
// configuration's, then its own, which EKS never lets the configuration
// set: the node group's name, its capacity type, and the launch template
// it was made from with its version while no update may be replacing
// instances of another version (as long as the node group is ACTIVE).
func nodegroupLabels(ng *ekstypes.Nodegroup) map[string]string {
	labels := maps.Clone(ng.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["eks.amazonaws.com/nodegroup"] = aws.ToString(ng.NodegroupName)
	if ng.CapacityType != "" {
		labels["eks.amazonaws.com/capacityType"] = string(ng.CapacityType)
	}
	if lt := ng.LaunchTemplate; lt != nil && aws.ToString(lt.Id) != "" {
		labels["eks.amazonaws.com/sourceLaunchTemplateId"] = aws.ToString(lt.Id)
		if version := aws.ToString(lt.Version); ng.Status == ekstypes.NodegroupStatusActive && version != "" && strings.Trim(version, "0123456789") == "" {
			labels["eks.amazonaws.com/sourceLaunchTemplateVersion"] = version
		}
	}
	return labels
}

// nodegroupTaints are the taints of a node group's configuration.
func nodegroupTaints(ng *ekstypes.Nodegroup) []corev1.Taint {
	var taints []corev1.Taint
	for _, t := range ng.Taints {
		taints = append(taints, corev1.Taint{Key: aws.ToString(t.Key), Value: aws.ToString(t.Value), Effect: kubeEffect(string(t.Effect))})
	}
	return taints
}

func joinMessages(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func autoScalingGroup(ng *ekstypes.Nodegroup) string {
	if ng.Resources == nil || len(ng.Resources.AutoScalingGroups) == 0 {
		return ""
	}
	return aws.ToString(ng.Resources.AutoScalingGroups[0].Name)
}

// connect returns the class's section and the API clients of its region
// and credentials.
func (d *Driver) connect(ctx context.Context, class drivers.Class) (*nodesetv1alpha1.EKSManagedNodeGroup, API, error) {
	s, err := section(class)
	if err != nil {
		return nil, API{}, err
	}
	if err := awscloud.CheckCredentials(class); err != nil {
		return nil, API{}, err
	}
	api, err := d.opts.Clients(ctx, s.Region, class.Credentials)
	return s, api, err
}

// DescribeGroup returns the node group and its instances, or ErrNotFound.
func (d *Driver) DescribeGroup(ctx context.Context, class drivers.Class, name string) (_ drivers.GroupStatus, err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, api, err := d.connect(ctx, class)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	ng, err := describe(ctx, api.EKS, s.ClusterName, name)
	if err != nil {
		return drivers.GroupStatus{}, err
	}
	return d.status(ctx, api, ng, nil)
}

// TerminateMachine terminates one instance in the node group's Auto Scaling
// group with the decrement, then sets the node group's desired size to what
// the Auto Scaling group now has, so EKS does not launch a replacement. The
// instance and its node group are looked for in the instance's own region
// (its providerID's zone's), which is not the class's when the class's
// region changed after it was launched.
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
	// Recorded first: the old region's node group is removed once empty.
	if err := d.recordFormerRegion(ctx, class, s, group, region); err != nil {
		return err
	}
	api, err := d.opts.Clients(ctx, region, class.Credentials)
	if err != nil {
		return err
	}
	ng, err := describe(ctx, api.EKS, s.ClusterName, group)
	if errors.Is(err, drivers.ErrNotFound) {
		// The node group is gone; its instance must be too.
		id, err := awscloud.InstanceID(providerID)
		if err != nil {
			return err
		}
		return awscloud.TerminateInstance(ctx, api.EC2, id)
	}
	if err != nil {
		return err
	}
	asg := autoScalingGroup(ng)
	if asg == "" {
		id, err := awscloud.InstanceID(providerID)
		if err != nil {
			return err
		}
		return awscloud.TerminateInstance(ctx, api.EC2, id)
	}
	if _, err := awscloud.TerminateInGroup(ctx, api.AutoScaling, api.EC2, asg, providerID); err != nil {
		return err
	}
	// Also when the instance was terminating already: a call that
	// terminated it may have failed before it lowered the node group.
	after, err := awscloud.FindGroup(ctx, api.AutoScaling, asg)
	if err != nil || ng.ScalingConfig == nil || aws.ToInt32(ng.ScalingConfig.DesiredSize) <= aws.ToInt32(after.DesiredCapacity) {
		return err
	}
	lowered := aws.ToInt32(after.DesiredCapacity)
	_, err = api.EKS.UpdateNodegroupConfig(ctx, &eks.UpdateNodegroupConfigInput{
		ClusterName: aws.String(s.ClusterName), NodegroupName: aws.String(group),
		ScalingConfig: &ekstypes.NodegroupScalingConfig{DesiredSize: aws.Int32(lowered),
			MinSize: aws.Int32(min(aws.ToInt32(ng.ScalingConfig.MinSize), lowered)), MaxSize: ng.ScalingConfig.MaxSize},
	})
	switch {
	case awscloud.IsCode(err, "ResourceInUseException"):
		return nil // an update runs; the next EnsureGroup sees the lower size
	case awscloud.IsCode(err, "ResourceNotFoundException"):
		return nil // deleted meanwhile, with its instances: nothing is left to lower
	}
	return classify("lowering node group "+group+" after terminating "+providerID, err)
}

// DeleteGroup deletes the node group: ErrInProgress until EKS has removed it.
func (d *Driver) DeleteGroup(ctx context.Context, class drivers.Class, name string) (err error) {
	defer awscloud.Redact(class.Credentials, &err)
	s, api, err := d.connect(ctx, class)
	if err != nil {
		return err
	}
	ng, err := describe(ctx, api.EKS, s.ClusterName, name)
	switch {
	case errors.Is(err, drivers.ErrNotFound):
		return nil
	case err != nil:
		return err
	case ng.Status == ekstypes.NodegroupStatusDeleting:
		return fmt.Errorf("node group %s: %w", name, drivers.ErrInProgress)
	}
	// The node groups of the class's former regions first: this one keeps
	// the record of them. Its Nodes are gone.
	if left, err := d.removeFormerGroups(ctx, api, s.Region, s.ClusterName, class.Credentials, ng, awscloud.OwnerFromTagMap(ng.Tags), true); err != nil {
		return err
	} else if left {
		return fmt.Errorf("node group %s of a former region is being deleted: %w", name, drivers.ErrInProgress)
	}
	_, err = api.EKS.DeleteNodegroup(ctx, &eks.DeleteNodegroupInput{ClusterName: aws.String(s.ClusterName), NodegroupName: aws.String(name)})
	switch {
	case awscloud.IsCode(err, "ResourceNotFoundException"):
		return nil
	case err != nil && !awscloud.IsCode(err, "ResourceInUseException"):
		return classify("deleting node group "+name, err)
	}
	if _, err := describe(ctx, api.EKS, s.ClusterName, name); errors.Is(err, drivers.ErrNotFound) {
		return nil // gone at once
	}
	if ng.Status == ekstypes.NodegroupStatusDeleteFailed {
		// Asked again, as EKS allows; but the deletion failed for a
		// reason (a security group still in use, a launch template that
		// could not be deleted), which it is tried again until, and
		// which is said: not a deletion that merely takes its time.
		return fmt.Errorf("node group %s: its deletion failed, and is tried again: %s", name, healthIssues(ng))
	}
	return fmt.Errorf("node group %s: %w", name, drivers.ErrInProgress)
}

// ListGroups returns the node groups of every scope whose tags name the
// cluster, for orphan collection; it fails rather than return a partial list.
func (d *Driver) ListGroups(ctx context.Context) ([]drivers.GroupStatus, error) {
	if d.opts.Scopes == nil {
		return nil, errors.New("eks-managed: no clusters to list node groups in")
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
// its region, cluster and classes, never its credentials.
func scopeName(scope Scope) string {
	name := scope.Region + "/" + scope.Cluster
	if len(scope.Classes) > 0 {
		return name + " (NodeClass " + strings.Join(scope.Classes, ", ") + ")"
	}
	sum := sha256.Sum256(scope.Credentials[awscloud.CredentialAccessKeyID])
	return name + " (credentials " + hex.EncodeToString(sum[:4]) + ")"
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

// ListGroupsIn returns the node groups of one scope whose tags name the
// cluster; it fails rather than return a partial list.
func (d *Driver) ListGroupsIn(ctx context.Context, name string) (_ []drivers.GroupStatus, err error) {
	var scope Scope
	found := false
	if d.opts.Scopes != nil {
		for _, s := range d.opts.Scopes() {
			if scopeName(s) == name {
				scope, found = s, true
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("eks-managed: no scope %s any more", name)
	}
	defer awscloud.Redact(scope.Credentials, &err)
	prefix := "nodeset-" + d.opts.Cluster + "-"
	api, err := d.opts.Clients(ctx, scope.Region, scope.Credentials)
	if err != nil {
		return nil, err
	}
	var out []drivers.GroupStatus
	pages := eks.NewListNodegroupsPaginator(api.EKS, &eks.ListNodegroupsInput{ClusterName: aws.String(scope.Cluster)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify("listing the node groups of "+scope.Cluster, err)
		}
		for _, name := range page.Nodegroups {
			if !strings.HasPrefix(name, prefix) {
				continue
			}
			ng, err := describe(ctx, api.EKS, scope.Cluster, name)
			if errors.Is(err, drivers.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, err
			}
			owner := awscloud.OwnerFromTagMap(ng.Tags)
			if owner.Cluster != d.opts.Cluster {
				continue
			}
			status := drivers.GroupStatus{Name: name, State: string(ng.Status), Owner: owner}
			if ng.CreatedAt != nil {
				status.CreatedAt = ng.CreatedAt.Unix()
			}
			status.Class = drivers.Class{Credentials: scope.Credentials, Spec: nodesetv1alpha1.NodeClassSpec{
				Driver: nodesetv1alpha1.DriverEKSManaged,
				DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{
					Region: scope.Region, ClusterName: scope.Cluster}},
			}}
			out = append(out, status)
		}
	}
	return out, nil
}

// goneMeanwhile is the error of an update of a node group that EKS
// answers ResourceNotFoundException, or nil for another answer: the node
// group was described a moment ago and is gone since (deleted by hand).
// That is no refusal of the NodeSet's template, as classify would make it
// (ResourceNotFoundException also means a cluster that does not exist):
// the next sync finds the node group gone and makes it again.
func goneMeanwhile(what string, err error) error {
	if !awscloud.IsCode(err, "ResourceNotFoundException") {
		return nil
	}
	return awscloud.Classify(what+" (deleted since it was described)", err)
}

// classify is awscloud.Classify with EKS's own codes, as the EKS API
// reference means them:
//   - InvalidParameterException ("the specified parameter is invalid"),
//     ClientException ("caused by a client action": permissions, an
//     identifier that is not valid), AccessDeniedException and
//     ResourceNotFoundException (a cluster that does not exist) need a
//     human: ErrInvalidConfiguration;
//   - InvalidRequestException is "invalid given the state of the cluster"
//     (a cluster or node group not ACTIVE, an operation in progress): a
//     state that passes, so the call is tried again later, and the spec
//     that asked it is not refused;
//   - ResourceLimitExceededException, a service quota: ErrOutOfCapacity;
//   - ServerException, ThrottlingException: transient and throttled, as
//     awscloud.Classify has them.
func classify(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case awscloud.IsCode(err, "InvalidParameterException"), awscloud.IsCode(err, "ClientException"),
		awscloud.IsCode(err, "AccessDeniedException"), awscloud.IsCode(err, "ResourceNotFoundException"):
		return fmt.Errorf("%s: %w: %v", what, drivers.ErrInvalidConfiguration, err)
	case awscloud.IsCode(err, "InvalidRequestException"):
		return fmt.Errorf("%s: EKS refuses it in the current state of the cluster or node group, and it is tried again: %w", what, err)
	case awscloud.IsCode(err, "ResourceLimitExceededException"):
		return fmt.Errorf("%s: %w: %v", what, drivers.ErrOutOfCapacity, err)
	}
	return awscloud.Classify(what, err)
}
