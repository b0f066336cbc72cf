package eksmanaged

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	asgtypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/awscloud"
	"nodeset.dev/nodeset/test/framework"
)

const region = "us-east-1"

var testCredentials = map[string][]byte{awscloud.CredentialAccessKeyID: []byte("testing"), awscloud.CredentialSecretAccessKey: []byte("testing")}

// world is moto with a VPC, a subnet and an EKS cluster "prod".
type world struct {
	endpoint string
	subnet   string
	api      API
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{endpoint: framework.StartMoto(t)}
	var err error
	w.api, err = SDKClients(awscloud.SDKConfig{Endpoint: w.endpoint})(ctx, region, testCredentials)
	require.NoError(t, err)
	ec2c := w.api.EC2.(*ec2.Client)
	w.subnet = framework.NewMotoNetwork(t, ec2c, region).Subnet
	_, err = w.api.EKS.(*eks.Client).CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("prod"),
		RoleArn:            aws.String("arn:aws:iam::123456789012:role/eks"),
		ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{w.subnet}}})
	require.NoError(t, err)
	return w
}

func (w *world) class() drivers.Class {
	return drivers.Class{Name: "managed", Credentials: testCredentials, Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverEKSManaged,
		DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{
			ClusterName: "prod", Region: region, NodeRole: "arn:aws:iam::123456789012:role/node", Subnets: []string{w.subnet},
			InstanceTypes: []string{"t3.large"}, CapacityType: "ON_DEMAND", Version: "1.37",
			Labels: map[string]string{"pool": "general"},
			Taints: []nodesetv1alpha1.ManagedTaint{{Key: "pool", Value: "general", Effect: "PREFER_NO_SCHEDULE"}},
			Tags:   map[string]string{"team": "platform"},
		}},
	}}
}

func (w *world) driver() *Driver {
	return New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) { return w.api, nil },
		Scopes: func() []Scope { return []Scope{{Region: region, Cluster: "prod", Credentials: testCredentials}} }})
}

func nodegroup(t *testing.T, api EKS, name string) *ekstypes.Nodegroup {
	t.Helper()
	out, err := api.DescribeNodegroup(context.Background(), &eks.DescribeNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String(name)})
	require.NoError(t, err)
	return out.Nodegroup
}

func taintStrings(taints []ekstypes.Taint) []string {
	var out []string
	for _, t := range taints {
		out = append(out, fmt.Sprintf("%s=%s:%s", aws.ToString(t.Key), aws.ToString(t.Value), t.Effect))
	}
	sort.Strings(out)
	return out
}

func TestNodeGroupAgainstMoto(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	class := w.class()
	require.NoError(t, d.Validate(ctx, class))
	owner := drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web", UID: "uid-web"}
	name := d.GroupName(owner)
	assert.LessOrEqual(t, len(name), 63, "EKS allows 63 characters")
	group := drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 2, MaxReplicas: 5, TemplateHash: "h1",
		Labels: map[string]string{"tier": "web", nodesetv1alpha1.LabelNodeSet: "web"},
		Taints: []corev1.Taint{{Key: "tier", Value: "web", Effect: corev1.TaintEffectNoSchedule}}}

	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, name, status.Name)
	assert.EqualValues(t, 2, status.DesiredSize)
	ng := nodegroup(t, w.api.EKS, name)
	assert.Equal(t, "arn:aws:iam::123456789012:role/node", aws.ToString(ng.NodeRole))
	assert.Equal(t, []string{"t3.large"}, ng.InstanceTypes)
	assert.EqualValues(t, 5, aws.ToInt32(ng.ScalingConfig.MaxSize))
	assert.Equal(t, map[string]string{"pool": "general", "tier": "web", nodesetv1alpha1.LabelNodeSet: "web"}, ng.Labels)
	assert.Equal(t, []string{"pool=general:PREFER_NO_SCHEDULE", "tier=web:NO_SCHEDULE"}, taintStrings(ng.Taints))
	assert.Equal(t, "e2e", ng.Tags[awscloud.TagCluster])
	assert.Equal(t, "web", ng.Tags[awscloud.TagNodeSet])
	assert.Equal(t, "uid-web", ng.Tags[awscloud.TagNodeSetUID])
	assert.Equal(t, "platform", ng.Tags["team"])

	// Scaling up raises the desired size; fewer replicas never lower it.
	group.Replicas = 3
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.EqualValues(t, 3, aws.ToInt32(nodegroup(t, w.api.EKS, name).ScalingConfig.DesiredSize))
	group.Replicas = 1
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.EqualValues(t, 3, aws.ToInt32(nodegroup(t, w.api.EKS, name).ScalingConfig.DesiredSize),
		"only a chosen, drained instance's termination lowers the group")

	// Labels and taints follow the NodeSet.
	group.Labels = map[string]string{"tier": "frontend"}
	group.Taints = nil
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	ng = nodegroup(t, w.api.EKS, name)
	assert.Equal(t, map[string]string{"pool": "general", "tier": "frontend"}, ng.Labels)
	assert.Equal(t, []string{"pool=general:PREFER_NO_SCHEDULE"}, taintStrings(ng.Taints))

	// Orphan collection sees the cluster's node groups.
	groups, err := d.ListGroups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	assert.Equal(t, name, groups[0].Name)
	assert.Equal(t, owner, groups[0].Owner)

	capacity, err := d.Capacity(ctx, class)
	require.NoError(t, err)
	assert.Equal(t, "2", capacity.Resources.Cpu().String())
	assert.Equal(t, "general", capacity.Labels["pool"])
	assert.Equal(t, "ON_DEMAND", capacity.Labels["eks.amazonaws.com/capacityType"])

	var deleteErr error
	for range 20 {
		if deleteErr = d.DeleteGroup(ctx, groups[0].Class, name); !errors.Is(deleteErr, drivers.ErrInProgress) {
			break
		}
	}
	require.NoError(t, deleteErr)
	_, err = d.DescribeGroup(ctx, class, name)
	assert.ErrorIs(t, err, drivers.ErrNotFound)
}

func TestValidateRefusesConflictsBeforeAnyCall(t *testing.T) {
	d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
		return API{}, errors.New("no call expected")
	}})
	good := func() drivers.Class {
		return drivers.Class{Spec: nodesetv1alpha1.NodeClassSpec{DriverSections: nodesetv1alpha1.DriverSections{
			EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{ClusterName: "prod", Region: region,
				NodeRole: "arn:aws:iam::123456789012:role/node", Subnets: []string{"subnet-1"}}}}}
	}
	require.NoError(t, d.Validate(context.Background(), good()))
	size := int32(50)
	for field, mutate := range map[string]func(*nodesetv1alpha1.EKSManagedNodeGroup){
		"spec.eksManagedNodeGroup.nodeRole": func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.NodeRole = "" },
		"spec.eksManagedNodeGroup.subnets":  func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.Subnets = nil },
		"spec.eksManagedNodeGroup.diskSize": func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.LaunchTemplate, s.DiskSize = &nodesetv1alpha1.LaunchTemplateReference{Name: "lt"}, &size
		},
		"spec.eksManagedNodeGroup.remoteAccess": func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.LaunchTemplate, s.RemoteAccess = &nodesetv1alpha1.LaunchTemplateReference{Name: "lt"}, &nodesetv1alpha1.RemoteAccess{EC2SSHKey: "k"}
		},
		"spec.eksManagedNodeGroup.capacityType":   func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.CapacityType = "CAPACITY_BLOCK" },
		"spec.eksManagedNodeGroup.releaseVersion": func(s *nodesetv1alpha1.EKSManagedNodeGroup) { s.ReleaseVersion = "1.37.2-20261101" },
		"spec.eksManagedNodeGroup.tags[aws:eks:cluster-name]": func(s *nodesetv1alpha1.EKSManagedNodeGroup) {
			s.Tags = map[string]string{"team": "a", "aws:eks:cluster-name": "other"}
		},
	} {
		class := good()
		mutate(class.Spec.EKSManagedNodeGroup)
		err := d.Validate(context.Background(), class)
		assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, field)
		assert.ErrorContains(t, err, field)
		_, err = d.EnsureGroup(context.Background(), drivers.Group{Name: "g", Class: class, Replicas: 1})
		assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "EnsureGroup refuses it too, before any call")
	}
}

// fakeEKS models what moto does not: updates and their states, node group
// status transitions and health, and the Auto Scaling group behind a node
// group (a real one in moto).
type fakeEKS struct {
	EKS
	mu      sync.Mutex
	groups  map[string]*ekstypes.Nodegroup
	updates map[string]*ekstypes.Update
	calls   []string
	// busy is an update EKS runs that DescribeNodegroup does not show
	// yet: EKS refuses every other update with ResourceInUseException.
	busy bool
	// tokens are the updates made, by client request token: a request
	// with a token EKS has seen is answered as the first one was.
	tokens map[string]string
	// refuses is a Kubernetes version EKS refuses for the node groups
	// (one above the cluster's).
	refuses string
	// tagging, when set, answers TagResource in place of the fake.
	tagging func(*eks.TagResourceInput) error
	// configUpdates makes UpdateNodegroupConfig answer with an update in
	// progress, as EKS does, which DescribeUpdate then reports.
	configUpdates bool
	// invalidRequest, when set, is the message of the
	// InvalidRequestException EKS answers UpdateNodegroupConfig with (a
	// node group it does not take updates of in its current state).
	invalidRequest string
}

func resourceInUse() error {
	return &smithy.GenericAPIError{Code: "ResourceInUseException", Message: "Nodegroup ng is currently being updated", Fault: smithy.FaultClient}
}

func (f *fakeEKS) call(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
}

func (f *fakeEKS) DescribeNodegroup(_ context.Context, in *eks.DescribeNodegroupInput, _ ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error) {
	f.call("DescribeNodegroup")
	ng, ok := f.groups[aws.ToString(in.NodegroupName)]
	if !ok {
		return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException"}
	}
	copied := *ng
	return &eks.DescribeNodegroupOutput{Nodegroup: &copied}, nil
}

func (f *fakeEKS) UpdateNodegroupVersion(_ context.Context, in *eks.UpdateNodegroupVersionInput, _ ...func(*eks.Options)) (*eks.UpdateNodegroupVersionOutput, error) {
	f.call("UpdateNodegroupVersion " + aws.ToString(in.Version))
	if id, ok := f.tokens[aws.ToString(in.ClientRequestToken)]; ok && in.ClientRequestToken != nil {
		return &eks.UpdateNodegroupVersionOutput{Update: &ekstypes.Update{Id: aws.String(id), Status: ekstypes.UpdateStatusInProgress,
			Type: ekstypes.UpdateTypeVersionUpdate, Params: f.updates[id].Params}}, nil
	}
	if f.busy {
		return nil, resourceInUse()
	}
	if v := aws.ToString(in.Version); v != "" && v == f.refuses {
		return nil, &smithy.GenericAPIError{Code: "InvalidParameterException", Fault: smithy.FaultClient,
			Message: "Requested Nodegroup version " + v + " is invalid. Allowed versions are equal or lower than the cluster's"}
	}
	id := fmt.Sprintf("update-%d", len(f.updates)+1)
	if f.tokens == nil {
		f.tokens = map[string]string{}
	}
	f.tokens[aws.ToString(in.ClientRequestToken)] = id
	u := &ekstypes.Update{Id: aws.String(id), Status: ekstypes.UpdateStatusInProgress, Type: ekstypes.UpdateTypeVersionUpdate}
	if in.Version != nil {
		u.Params = append(u.Params, ekstypes.UpdateParam{Type: ekstypes.UpdateParamTypeVersion, Value: in.Version})
	}
	if in.ReleaseVersion != nil {
		u.Params = append(u.Params, ekstypes.UpdateParam{Type: ekstypes.UpdateParamTypeReleaseVersion, Value: in.ReleaseVersion})
	}
	if lt := in.LaunchTemplate; lt != nil && lt.Version != nil {
		u.Params = append(u.Params, ekstypes.UpdateParam{Type: ekstypes.UpdateParamTypeLaunchTemplateVersion, Value: lt.Version})
	}
	f.updates[id] = u
	f.groups[aws.ToString(in.NodegroupName)].Status = ekstypes.NodegroupStatusUpdating
	return &eks.UpdateNodegroupVersionOutput{Update: u}, nil
}

func (f *fakeEKS) UpdateNodegroupConfig(_ context.Context, in *eks.UpdateNodegroupConfigInput, _ ...func(*eks.Options)) (*eks.UpdateNodegroupConfigOutput, error) {
	f.call("UpdateNodegroupConfig")
	if f.busy {
		return nil, resourceInUse()
	}
	if f.invalidRequest != "" {
		return nil, &smithy.GenericAPIError{Code: "InvalidRequestException", Message: f.invalidRequest, Fault: smithy.FaultClient}
	}
	ng := f.groups[aws.ToString(in.NodegroupName)]
	if sc := in.ScalingConfig; sc != nil {
		ng.ScalingConfig = sc
	}
	if l := in.Labels; l != nil {
		labels := maps.Clone(ng.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, l.AddOrUpdateLabels)
		for _, k := range l.RemoveLabels {
			delete(labels, k)
		}
		ng.Labels = labels
	}
	if !f.configUpdates {
		return &eks.UpdateNodegroupConfigOutput{}, nil
	}
	id := fmt.Sprintf("update-%d", len(f.updates)+1)
	u := &ekstypes.Update{Id: aws.String(id), Status: ekstypes.UpdateStatusInProgress, Type: ekstypes.UpdateTypeConfigUpdate}
	f.updates[id] = u
	copied := *u
	return &eks.UpdateNodegroupConfigOutput{Update: &copied}, nil
}

func (f *fakeEKS) TagResource(_ context.Context, in *eks.TagResourceInput, _ ...func(*eks.Options)) (*eks.TagResourceOutput, error) {
	f.call("TagResource")
	if f.tagging != nil {
		if err := f.tagging(in); err != nil {
			return nil, err
		}
	}
	for _, ng := range f.groups {
		if aws.ToString(ng.NodegroupArn) == aws.ToString(in.ResourceArn) {
			for k, v := range in.Tags {
				ng.Tags[k] = v
			}
			return &eks.TagResourceOutput{}, nil
		}
	}
	return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException"}
}

func (f *fakeEKS) DescribeUpdate(_ context.Context, in *eks.DescribeUpdateInput, _ ...func(*eks.Options)) (*eks.DescribeUpdateOutput, error) {
	f.call("DescribeUpdate " + aws.ToString(in.UpdateId))
	u, ok := f.updates[aws.ToString(in.UpdateId)]
	if !ok {
		return nil, &smithy.GenericAPIError{Code: "ResourceNotFoundException"}
	}
	copied := *u
	return &eks.DescribeUpdateOutput{Update: &copied}, nil
}

// ngOwner is the NodeSet the fake's node group "ng" is tagged with.
var ngOwner = drivers.Owner{Cluster: "e2e", Namespace: "team-a", Name: "web"}

// managedWorld is a node group "ng" of the fake EKS whose Auto Scaling
// group "ng-asg" is real, in moto, with two instances.
func managedWorld(t *testing.T) (*world, *fakeEKS, *Driver) {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t)
	ec2c := w.api.EC2.(*ec2.Client)
	images, err := ec2c.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	require.NoError(t, err)
	_, err = ec2c.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String("eks-ng"),
		LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: images.Images[0].ImageId, InstanceType: "t3.large"}})
	// The SDK tries a create again when moto, loaded, answers late; the
	// second try finds the first one's template.
	if !awscloud.IsCode(err, "InvalidLaunchTemplateName.AlreadyExistsException") {
		require.NoError(t, err)
	}
	_, err = w.api.AutoScaling.CreateAutoScalingGroup(ctx, &autoscaling.CreateAutoScalingGroupInput{AutoScalingGroupName: aws.String("ng-asg"),
		MinSize: aws.Int32(0), MaxSize: aws.Int32(5), DesiredCapacity: aws.Int32(2), VPCZoneIdentifier: aws.String(w.subnet),
		LaunchTemplate: &asgtypes.LaunchTemplateSpecification{LaunchTemplateName: aws.String("eks-ng"), Version: aws.String("$Latest")}})
	require.NoError(t, err)
	fake := &fakeEKS{updates: map[string]*ekstypes.Update{}, groups: map[string]*ekstypes.Nodegroup{"ng": {
		NodegroupName: aws.String("ng"), Status: ekstypes.NodegroupStatusActive, Version: aws.String("1.36"),
		NodegroupArn:  aws.String("arn:aws:eks:us-east-1:123456789012:nodegroup/prod/ng/1"),
		ScalingConfig: &ekstypes.NodegroupScalingConfig{MinSize: aws.Int32(0), MaxSize: aws.Int32(5), DesiredSize: aws.Int32(2)},
		Labels:        map[string]string{"pool": "general"},
		Taints:        []ekstypes.Taint{{Key: aws.String("pool"), Value: aws.String("general"), Effect: ekstypes.TaintEffectPreferNoSchedule}},
		Resources:     &ekstypes.NodegroupResources{AutoScalingGroups: []ekstypes.AutoScalingGroup{{Name: aws.String("ng-asg")}}},
		Tags:          map[string]string{awscloud.TagCluster: "e2e", awscloud.TagNamespace: "team-a", awscloud.TagNodeSet: "web"},
		CreatedAt:     aws.Time(time.Now()),
	}}}
	d := New(Options{Cluster: "e2e", Clients: func(context.Context, string, map[string][]byte) (API, error) {
		return API{EKS: fake, AutoScaling: w.api.AutoScaling, EC2: w.api.EC2}, nil
	}})
	return w, fake, d
}

func TestManagedUpdateIsStartedTrackedAndResumed(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	class := w.class() // version 1.37; the node group runs 1.36
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: class, Replicas: 2, MaxReplicas: 5, TemplateHash: "h2"}

	// Without the Managed strategy the version change waits, and says so.
	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, status.Message, "strategy Managed")
	assert.NotContains(t, fake.calls, "UpdateNodegroupVersion 1.37")
	require.Len(t, status.Machines, 2, "the instances of the Auto Scaling group behind the node group")
	for _, m := range status.Machines {
		assert.NotEmpty(t, m.Name)
		assert.Regexp(t, `^aws:///us-east-1a/i-`, m.ProviderID)
		assert.Equal(t, "ng", m.Labels["eks.amazonaws.com/nodegroup"], "what EKS's bootstrap gives the kubelet, which a Node nodeset made never gets")
		assert.Equal(t, "general", m.Labels["pool"])
		assert.Equal(t, "us-east-1a", m.Labels[corev1.LabelTopologyZone])
		assert.Contains(t, m.Taints, corev1.Taint{Key: "pool", Value: "general", Effect: corev1.TaintEffectPreferNoSchedule})
	}

	group.ManagedRollout = true
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, fake.calls, "UpdateNodegroupVersion 1.37")
	assert.Equal(t, "update-1", status.UpdateID)
	assert.Equal(t, "InProgress", status.UpdateStatus)

	// A restarted controller knows the update only from the NodeSet's
	// status: it resumes tracking it and starts nothing else.
	restarted := New(Options{Cluster: "e2e", Clients: d.opts.Clients})
	group.UpdateID = status.UpdateID
	fake.calls = nil
	status, err = restarted.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, []string{"DescribeNodegroup", "DescribeUpdate update-1"}, fake.calls, "no writes while EKS updates")
	assert.Equal(t, "UPDATING", status.State)
	assert.Equal(t, "InProgress", status.UpdateStatus)

	// EKS finishes.
	fake.updates["update-1"].Status = ekstypes.UpdateStatusSuccessful
	fake.groups["ng"].Status = ekstypes.NodegroupStatusActive
	fake.groups["ng"].Version = aws.String("1.37")
	status, err = restarted.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "Successful", status.UpdateStatus)
	assert.Equal(t, "ACTIVE", status.State)
	assert.Empty(t, status.Message)

	// A failed update says why.
	fake.updates["update-1"].Status = ekstypes.UpdateStatusFailed
	fake.updates["update-1"].Errors = []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodePodEvictionFailure, ErrorMessage: aws.String("PDB web blocks eviction")}}
	status, err = restarted.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Contains(t, status.Message, "update update-1 failed: PodEvictionFailure: PDB web blocks eviction")
}

func TestDegradedHealthIsReported(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	fake.groups["ng"].Version = aws.String("1.37")
	fake.groups["ng"].Status = ekstypes.NodegroupStatusDegraded
	fake.groups["ng"].Health = &ekstypes.NodegroupHealth{Issues: []ekstypes.Issue{{Code: ekstypes.NodegroupIssueCodeAsgInstanceLaunchFailures,
		Message: aws.String("Could not launch On-Demand Instances. InsufficientInstanceCapacity"), ResourceIds: []string{"ng-asg"}}}}
	status, err := d.EnsureGroup(ctx, drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5})
	require.NoError(t, err)
	assert.Equal(t, "DEGRADED", status.State)
	assert.Equal(t, "AsgInstanceLaunchFailures: Could not launch On-Demand Instances. InsufficientInstanceCapacity (ng-asg)", status.Message)

	// While EKS creates or updates the group, nothing is written.
	fake.groups["ng"].Status = ekstypes.NodegroupStatusUpdating
	fake.calls = nil
	_, err = d.EnsureGroup(ctx, drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 4, MaxReplicas: 5})
	require.NoError(t, err)
	assert.Equal(t, []string{"DescribeNodegroup"}, fake.calls)
}

func TestTerminateMachineLowersTheNodeGroupToo(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	status, err := d.DescribeGroup(ctx, w.class(), "ng")
	require.NoError(t, err)
	require.Len(t, status.Machines, 2)
	victim := status.Machines[0].ProviderID
	require.NoError(t, d.TerminateMachine(ctx, w.class(), "ng", victim))
	assert.EqualValues(t, 1, aws.ToInt32(fake.groups["ng"].ScalingConfig.DesiredSize), "EKS's desired size follows the decrement")
	after, err := awscloud.GroupInstances(ctx, w.api.AutoScaling, w.api.EC2, "ng-asg")
	require.NoError(t, err)
	assert.EqualValues(t, 1, after.DesiredSize)
	for _, m := range after.Machines {
		if m.ProviderID == victim {
			assert.Equal(t, drivers.MachineStopping, m.State)
		}
	}
	fake.calls = nil
	require.NoError(t, d.TerminateMachine(ctx, w.class(), "ng", victim), "terminating it again is done")
	assert.NotContains(t, fake.calls, "UpdateNodegroupConfig")
}

func TestValidateCloudChecksTheClusterAndSubnets(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	require.NoError(t, d.ValidateCloud(ctx, w.class()))
	class := w.class()
	class.Spec.EKSManagedNodeGroup.ClusterName = "staging"
	err := d.ValidateCloud(ctx, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.eksManagedNodeGroup.clusterName: EKS cluster staging does not exist in us-east-1")
	class = w.class()
	class.Spec.EKSManagedNodeGroup.Subnets = []string{"subnet-0123456789abcdef0"}
	err = d.ValidateCloud(ctx, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.eksManagedNodeGroup.subnets subnet-0123456789abcdef0: invalid configuration: InvalidSubnetID.NotFound")
}

// TestAGroupGoneWhileTaggedIsNoRefusedTemplate: a node group deleted
// between the describe and the tag (by hand, or by its NodeSet's deletion)
// answers TagResource with ResourceNotFoundException. That says nothing of
// the template, which must not be marked refused: the error is one to
// retry, and the next sync finds the group gone.
func TestAGroupGoneWhileTaggedIsNoRefusedTemplate(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	fake.groups["ng"].Version = aws.String("1.37")
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5, TemplateHash: "h1"}
	_, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)

	fake.tagging = func(*eks.TagResourceInput) error {
		delete(fake.groups, "ng")
		return &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "No node group found for name: ng.", Fault: smithy.FaultClient}
	}
	fake.calls, group.TemplateHash = nil, "h2"
	_, err = d.EnsureGroup(ctx, group)
	require.Error(t, err)
	assert.NotErrorIs(t, err, drivers.ErrInvalidConfiguration, "a group gone is no refusal of its template")
	assert.ErrorContains(t, err, "ResourceNotFoundException")
	require.Contains(t, fake.calls, "TagResource", "the test reached the tag")
}

// TestTemplateHashTagFollowsTheConfiguration: the node group's
// template-hash tag names the hash its configuration was last brought in
// step with (moto does not tag node groups: a fake EKS).
func TestTemplateHashTagFollowsTheConfiguration(t *testing.T) {
	ctx := context.Background()
	w, fake, d := managedWorld(t)
	fake.groups["ng"].Version = aws.String("1.37")
	group := drivers.Group{Name: "ng", Owner: ngOwner, Class: w.class(), Replicas: 2, MaxReplicas: 5, TemplateHash: "h1", Labels: map[string]string{"tier": "web"}}

	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.NotEqual(t, "h1", fake.groups["ng"].Tags[awscloud.TagTemplateHash], "not while a config change is being applied")
	assert.NotEqual(t, "h1", status.TemplateHash, "the status says the group is not at h1 yet")
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "h1", fake.groups["ng"].Tags[awscloud.TagTemplateHash])
	assert.Equal(t, "h1", status.TemplateHash, "and the status says so")

	group.TemplateHash, group.Labels = "h2", map[string]string{"tier": "frontend"}
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "h2", fake.groups["ng"].Tags[awscloud.TagTemplateHash], "updated after creation, with the configuration")
	fake.calls = nil
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.NotContains(t, fake.calls, "TagResource", "no write when nothing changed")

	t.Log("a version change that waits for the Managed strategy leaves the hash as it was")
	class := w.class()
	section := *class.Spec.EKSManagedNodeGroup
	section.Version = "1.38"
	class.Spec.EKSManagedNodeGroup = &section
	group.Class, group.TemplateHash = class, "h3"
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.Equal(t, "h2", fake.groups["ng"].Tags[awscloud.TagTemplateHash])
	assert.Equal(t, "h2", status.TemplateHash)
}

func TestValidateCloudRefusesAnUnknownInstanceTypeAndAMissingKey(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver()
	class := w.class()
	section := *class.Spec.EKSManagedNodeGroup
	section.InstanceTypes = []string{"t9.huge"}
	class.Spec.EKSManagedNodeGroup = &section
	err := d.ValidateCloud(ctx, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.eksManagedNodeGroup.instanceTypes t9.huge: invalid configuration: InvalidInstanceType")

	class = w.class()
	class.Spec.CredentialsSecretRef = &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "aws-credentials"}
	class.Credentials = map[string][]byte{"aws_access_key": []byte("testing")}
	err = d.ValidateCloud(ctx, class)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.credentialsSecretRef: Secret nodeset-system/aws-credentials has no key aws_access_key_id (it has keys aws_access_key)")
}
