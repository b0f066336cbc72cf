package eksasg

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
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

// world is a moto server with a VPC, a subnet and an AMI to launch from.
type world struct {
	endpoint string
	subnet   string
	image    string
	asg      awscloud.AutoScaling
	ec2      *ec2.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldAt(t, framework.StartMoto(t))
}

func newWorldAt(t *testing.T, endpoint string) *world {
	t.Helper()
	ctx := context.Background()
	w := &world{endpoint: endpoint}
	asg, ec2c, err := awscloud.SDKClients(w.endpoint)(ctx, region, testCredentials)
	require.NoError(t, err)
	w.asg, w.ec2 = asg, ec2c.(*ec2.Client)
	network := framework.NewMotoNetwork(t, w.ec2, region)
	w.subnet, w.image = network.Subnet, network.Image
	return w
}

func (w *world) class() drivers.Class {
	return drivers.Class{Name: "eks", Credentials: testCredentials, Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverEKSASG,
		DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
			ClusterName: "prod", Region: region, ImageID: w.image, InstanceType: "t3.large",
			SubnetIDs: []string{w.subnet}, Tags: map[string]string{"team": "a"},
			Bootstrap: &nodesetv1alpha1.EKSBootstrap{APIServerEndpoint: "https://prod.example.com", CertificateAuthority: "Q0E="},
		}},
	}}
}

// secondSubnet makes a subnet in the region's second zone and returns its id.
func (w *world) secondSubnet(t *testing.T) string {
	t.Helper()
	return framework.SecondZoneSubnet(t, w.ec2, w.subnet, region+"b")
}

func (w *world) driver(cluster string) *Driver {
	return New(Options{Cluster: cluster, Clients: awscloud.SDKClients(w.endpoint), Scopes: func() []Scope { return []Scope{{Region: region, Credentials: testCredentials}} }})
}

func TestGroupLifecycleAgainstMoto(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	class := w.class()
	require.NoError(t, d.Validate(ctx, class))
	owner := drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web", UID: "uid-1"}
	name := GroupName("prod", "team-a", "web")
	group := drivers.Group{Name: name, Owner: owner, Class: class, Replicas: 3, MinReplicas: 0, MaxReplicas: 10, TemplateHash: "h1",
		Labels: map[string]string{"tier": "web"}, Taints: []corev1.Taint{{Key: "dedicated", Value: "web", Effect: corev1.TaintEffectNoSchedule}}}

	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.EqualValues(t, 3, status.DesiredSize)
	require.Len(t, status.Machines, 3)
	for _, m := range status.Machines {
		_, err := awscloud.InstanceID(m.ProviderID)
		assert.NoError(t, err, m.ProviderID)
		assert.Regexp(t, `^aws:///us-east-1a/i-`, m.ProviderID)
		assert.NotEmpty(t, m.Name, "the Node name is the instance's private DNS name")
		assert.Equal(t, owner, m.Owner)
		assert.Equal(t, "h1", m.TemplateHash, "instances carry the hash of their launch template version")
		assert.Equal(t, "us-east-1a", m.Labels[corev1.LabelTopologyZone], "what the cloud controller manager would label the Node with")
		assert.Equal(t, "us-east-1", m.Labels[corev1.LabelTopologyRegion])
		assert.NotEmpty(t, m.Labels[corev1.LabelInstanceTypeStable])
	}

	g, err := awscloud.FindGroup(ctx, w.asg, name)
	require.NoError(t, err)
	tags := map[string]string{}
	for _, tag := range g.Tags {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	assert.Equal(t, "prod", tags[awscloud.TagCluster])
	assert.Equal(t, "team-a", tags[awscloud.TagNamespace])
	assert.Equal(t, "web", tags[awscloud.TagNodeSet])
	assert.Equal(t, "uid-1", tags[awscloud.TagNodeSetUID])
	assert.Equal(t, "a", tags["team"])
	assert.NotContains(t, tags, "k8s.io/cluster-autoscaler/enabled", "nodeset, not the group, is cluster-autoscaler's target")
	var suspended []string
	for _, p := range g.SuspendedProcesses {
		suspended = append(suspended, aws.ToString(p.ProcessName))
	}
	assert.Contains(t, suspended, "AZRebalance", "AWS never rebalances (terminates) instances by itself")

	// The user data joins the cluster with the set's labels and taints.
	versions, err := w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(name)})
	require.NoError(t, err)
	require.Len(t, versions.LaunchTemplateVersions, 1)
	userData, err := base64.StdEncoding.DecodeString(aws.ToString(versions.LaunchTemplateVersions[0].LaunchTemplateData.UserData))
	require.NoError(t, err)
	assert.Contains(t, string(userData), "kind: NodeConfig")
	assert.Contains(t, string(userData), `"--node-labels=tier=web"`)
	assert.Contains(t, string(userData), `"--register-with-taints=dedicated=web:NoSchedule"`)

	// Fewer replicas never lower the desired capacity: only a chosen,
	// drained instance goes, with the decrement in the same call.
	group.Replicas = 2
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	assert.EqualValues(t, 3, status.DesiredSize)
	victim := status.Machines[1].ProviderID
	require.NoError(t, d.TerminateMachine(ctx, class, name, victim))
	status, err = d.DescribeGroup(ctx, class, name)
	require.NoError(t, err)
	assert.EqualValues(t, 2, status.DesiredSize)
	for _, m := range status.Machines {
		if m.ProviderID == victim {
			assert.Equal(t, drivers.MachineStopping, m.State, "the victim is on its way out")
		}
	}
	require.NoError(t, d.TerminateMachine(ctx, class, name, "aws:///us-east-1a/i-0123456789abcdef0"), "an instance already gone is not an error")

	// A new template hash is a new launch template version.
	group.TemplateHash = "h2"
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	versions, err = w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(name)})
	require.NoError(t, err)
	assert.Len(t, versions.LaunchTemplateVersions, 2)
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	versions, err = w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(name)})
	require.NoError(t, err)
	assert.Len(t, versions.LaunchTemplateVersions, 2, "the same hash makes no new version")
	// New instances start from the new version.
	group.Replicas = 3
	status, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	hashes := map[string]int{}
	for _, m := range status.Machines {
		if m.State != drivers.MachineStopping {
			hashes[m.TemplateHash]++
		}
	}
	assert.Equal(t, map[string]int{"h1": 2, "h2": 1}, hashes)

	// Orphan collection sees this cluster's groups only.
	other := w.driver("staging")
	_, err = other.EnsureGroup(ctx, drivers.Group{Name: GroupName("staging", "team-a", "web"), Owner: drivers.Owner{Cluster: "staging", Namespace: "team-a", Name: "web"},
		Class: class, Replicas: 1, MaxReplicas: 1, TemplateHash: "s1"})
	require.NoError(t, err)
	groups, err := d.ListGroups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	assert.Equal(t, name, groups[0].Name)

	capacity, err := d.Capacity(ctx, class)
	require.NoError(t, err)
	assert.Equal(t, "2", capacity.Resources.Cpu().String())
	assert.Equal(t, "8Gi", capacity.Resources.Memory().String())
	assert.Equal(t, "35", capacity.Resources.Pods().String(), "3 ENIs x (12 addresses - 1) + 2")
	assert.Equal(t, "t3.large", capacity.Labels[corev1.LabelInstanceTypeStable])

	// Deletion: the group with its instances, then the launch template.
	var deleteErr error
	for range 20 {
		if deleteErr = d.DeleteGroup(ctx, class, name); !errors.Is(deleteErr, drivers.ErrInProgress) {
			break
		}
	}
	require.NoError(t, deleteErr)
	_, err = d.DescribeGroup(ctx, class, name)
	assert.ErrorIs(t, err, drivers.ErrNotFound)
	_, err = w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String(name)})
	assert.Error(t, err, "the launch template went with the group")
	require.NoError(t, d.DeleteGroup(ctx, class, name), "deleting a deleted group is done")
}

func TestValidateNamesTheField(t *testing.T) {
	good := func() drivers.Class {
		return drivers.Class{Spec: nodesetv1alpha1.NodeClassSpec{DriverSections: nodesetv1alpha1.DriverSections{
			EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: region, ImageID: "ami-123",
				InstanceType: "t3.large", SubnetIDs: []string{"subnet-1"}}}}}
	}
	d := New(Options{Cluster: "prod"})
	require.NoError(t, d.Validate(context.Background(), good()))
	for field, mutate := range map[string]func(*nodesetv1alpha1.EKSAutoscalingGroup){
		"spec.eksAutoscalingGroup.clusterName":  func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.ClusterName = "" },
		"spec.eksAutoscalingGroup.imageID":      func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.ImageID = "centos" },
		"spec.eksAutoscalingGroup.instanceType": func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.InstanceType = "" },
		"spec.eksAutoscalingGroup.mixedInstances": func(s *nodesetv1alpha1.EKSAutoscalingGroup) {
			s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large"}}
		},
		"spec.eksAutoscalingGroup.subnetIDs[0]": func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.SubnetIDs = []string{"vpc-1"} },
	} {
		class := good()
		mutate(class.Spec.EKSAutoscalingGroup)
		err := d.Validate(context.Background(), class)
		assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration, field)
		assert.ErrorContains(t, err, field)
	}
}

func TestGroupNamesAreDeterministicAndBounded(t *testing.T) {
	a := GroupName("prod", "team-a", "web")
	assert.Equal(t, a, GroupName("prod", "team-a", "web"))
	assert.NotEqual(t, a, GroupName("prod", "team-a-web", ""), "the hash tells apart what the dashes join")
	long := GroupName("prod", string(make([]byte, 63)), string(make([]byte, 253)))
	assert.LessOrEqual(t, len(long), 128, "launch template names are at most 128 characters")
}

// callCounter counts the API calls of awscloud.NewSDKClients by operation.
type callCounter struct {
	mu       sync.Mutex
	calls    map[string]int
	attempts map[string]int
}

func (c *callCounter) observe(operation, outcome string, attempts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[operation+" "+outcome]++
	c.attempts[operation] += attempts
}

func (c *callCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = map[string]int{}
	c.attempts = map[string]int{}
	return out
}

// TestCallsPerPollDoNotGrowWithNodeSets: once the groups exist, a poll of
// every NodeSet costs one DescribeAutoScalingGroups and one
// DescribeInstances for the region, however many NodeSets there are.
func TestCallsPerPollDoNotGrowWithNodeSets(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	counter := &callCounter{calls: map[string]int{}, attempts: map[string]int{}}
	now := time.Unix(1_800_000_000, 0)
	d := New(Options{Cluster: "prod", Clients: awscloud.NewSDKClients(awscloud.SDKConfig{Endpoint: w.endpoint, Observe: counter.observe}),
		PollInterval: time.Minute, Now: func() time.Time { return now }})
	class := w.class()
	group := func(i int) drivers.Group {
		name := fmt.Sprintf("set-%d", i)
		return drivers.Group{Name: GroupName("prod", "team-a", name), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: name},
			Class: class, Replicas: 1, MaxReplicas: 3, TemplateHash: "h1"}
	}
	poll := func(sets int) map[string]int {
		now = now.Add(2 * time.Minute) // the last look is stale
		counter.take()
		for i := range sets {
			status, err := d.EnsureGroup(ctx, group(i))
			require.NoError(t, err)
			require.Len(t, status.Machines, 1, "set-%d", i)
		}
		return counter.take()
	}
	for _, sets := range []int{1, 6} {
		for i := range sets {
			_, err := d.EnsureGroup(ctx, group(i)) // creates what is missing
			require.NoError(t, err)
		}
		calls := poll(sets)
		t.Logf("%d NodeSet(s): calls per poll %v", sets, calls)
		assert.Equal(t, map[string]int{"DescribeAutoScalingGroups success": 1, "DescribeInstances success": 1}, calls, "%d NodeSets", sets)
	}
	// A change is made at once, and the next poll looks again.
	g := group(0)
	g.Replicas = 2
	status, err := d.EnsureGroup(ctx, g)
	require.NoError(t, err)
	assert.EqualValues(t, 2, status.DesiredSize)
	calls := counter.take()
	assert.Equal(t, 1, calls["SetDesiredCapacity success"], "%v", calls)
	status, err = d.EnsureGroup(ctx, g)
	require.NoError(t, err)
	assert.Len(t, status.Machines, 2, "the look after a change is a new one")
}

// throttlingProxy stands between the driver and moto and answers the first
// throttle calls of one Auto Scaling operation with AWS's throttling error.
type throttlingProxy struct {
	mu        sync.Mutex
	operation string
	throttle  int
	attempts  int
}

func (p *throttlingProxy) start(t *testing.T, upstream string) string {
	return framework.StartInterceptor(t, upstream, func(w http.ResponseWriter, _ *http.Request, _ []byte, form url.Values) bool {
		if form.Get("Action") != p.operation {
			return false
		}
		p.mu.Lock()
		p.attempts++
		throttled := p.attempts <= p.throttle
		p.mu.Unlock()
		if !throttled {
			return false
		}
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>r</RequestId></ErrorResponse>`)
		return true
	})
}

func TestThrottlingIsRetriedThenReported(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	p := &throttlingProxy{operation: "DescribeAutoScalingGroups", throttle: 2}
	counter := &callCounter{calls: map[string]int{}, attempts: map[string]int{}}
	d := New(Options{Cluster: "prod", Clients: awscloud.NewSDKClients(awscloud.SDKConfig{Endpoint: p.start(t, w.endpoint), Observe: counter.observe, MaxAttempts: 4,
		MaxBackoff: 200 * time.Millisecond})})
	group := drivers.Group{Name: GroupName("prod", "team-a", "web"), Owner: drivers.Owner{Cluster: "prod", Namespace: "team-a", Name: "web"},
		Class: w.class(), Replicas: 1, MaxReplicas: 1, TemplateHash: "h1"}

	status, err := d.EnsureGroup(ctx, group)
	require.NoError(t, err, "two throttled attempts are retried (with jittered backoff) inside the call")
	assert.Len(t, status.Machines, 1)
	assert.Equal(t, 4, p.attempts, "two throttled, the retry that was answered, and the look at the result")
	assert.Equal(t, 4, counter.attempts["DescribeAutoScalingGroups"], "the retries are counted")
	calls := counter.take()
	assert.Zero(t, calls["DescribeAutoScalingGroups throttled"], "%v", calls)
	assert.Positive(t, calls["DescribeAutoScalingGroups success"], "%v", calls)

	p.mu.Lock()
	p.attempts, p.throttle = 0, 100
	p.mu.Unlock()
	_, err = d.DescribeGroup(ctx, group.Class, group.Name)
	require.ErrorIs(t, err, drivers.ErrThrottled, "throttling past the attempts is reported as such, for the controller to back off")
	assert.Equal(t, 4, p.attempts, "MaxAttempts bounds the retries")
	assert.Equal(t, map[string]int{"DescribeAutoScalingGroups throttled": 1}, counter.take())
}

// recordingAutoScaling passes calls to moto and keeps the group's creation
// input, for what moto does not model (spot, mixed instances, zones).
type recordingAutoScaling struct {
	awscloud.AutoScaling
	created *autoscaling.CreateAutoScalingGroupInput
}

func (r *recordingAutoScaling) CreateAutoScalingGroup(ctx context.Context, in *autoscaling.CreateAutoScalingGroupInput,
	opts ...func(*autoscaling.Options)) (*autoscaling.CreateAutoScalingGroupOutput, error) {
	r.created = in
	return r.AutoScaling.CreateAutoScalingGroup(ctx, in, opts...)
}

func TestMixedInstancesSpotAndZones(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	subnetB := w.secondSubnet(t)
	real := awscloud.SDKClients(w.endpoint)
	recorder := &recordingAutoScaling{}
	d := New(Options{Cluster: "prod", Clients: func(ctx context.Context, r string, creds map[string][]byte) (awscloud.AutoScaling, awscloud.EC2, error) {
		asg, ec2c, err := real(ctx, r, creds)
		recorder.AutoScaling = asg
		return recorder, ec2c, err
	}})
	class := w.class()
	s := class.Spec.EKSAutoscalingGroup
	s.InstanceType = ""
	s.SubnetIDs = append(s.SubnetIDs, subnetB)
	s.MixedInstances = &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large", "m5a.large", "m6i.large"},
		OnDemandBaseCapacity: aws.Int32(1), OnDemandPercentageAboveBaseCapacity: aws.Int32(25),
		SpotAllocationStrategy: "price-capacity-optimized", SpotMaxPrice: "0.05"}
	require.NoError(t, d.Validate(ctx, class))
	_, err := d.EnsureGroup(ctx, drivers.Group{Name: "mixed", Owner: drivers.Owner{Cluster: "prod", Namespace: "a", Name: "mixed"},
		Class: class, Replicas: 4, MaxReplicas: 8, TemplateHash: "h1"})
	require.NoError(t, err)
	in := recorder.created
	require.NotNil(t, in)
	assert.Equal(t, strings.Join(s.SubnetIDs, ","), aws.ToString(in.VPCZoneIdentifier), "instances spread over the subnets' zones")
	assert.Nil(t, in.LaunchTemplate, "the template goes in the mixed-instances policy")
	require.NotNil(t, in.MixedInstancesPolicy)
	dist := in.MixedInstancesPolicy.InstancesDistribution
	assert.EqualValues(t, 1, aws.ToInt32(dist.OnDemandBaseCapacity))
	assert.EqualValues(t, 25, aws.ToInt32(dist.OnDemandPercentageAboveBaseCapacity))
	assert.Equal(t, "price-capacity-optimized", aws.ToString(dist.SpotAllocationStrategy))
	assert.Equal(t, "0.05", aws.ToString(dist.SpotMaxPrice))
	var types []string
	for _, o := range in.MixedInstancesPolicy.LaunchTemplate.Overrides {
		types = append(types, aws.ToString(o.InstanceType))
	}
	assert.Equal(t, s.MixedInstances.InstanceTypes, types)
	assert.Equal(t, "mixed", aws.ToString(in.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification.LaunchTemplateName))

	capacity, err := d.Capacity(ctx, class)
	require.NoError(t, err)
	assert.Equal(t, "m5.large", capacity.Labels[corev1.LabelInstanceTypeStable], "scale-from-zero assumes the first type")
}

func TestValidateCloudNamesWhatDoesNotExist(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.driver("prod")
	require.NoError(t, d.ValidateCloud(ctx, w.class()))
	for field, mutate := range map[string]func(*nodesetv1alpha1.EKSAutoscalingGroup){
		"spec.eksAutoscalingGroup.imageID":          func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.ImageID = "ami-0123456789abcdef0" },
		"spec.eksAutoscalingGroup.subnetIDs":        func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.SubnetIDs = []string{"subnet-0123456789abcdef0"} },
		"spec.eksAutoscalingGroup.securityGroupIDs": func(s *nodesetv1alpha1.EKSAutoscalingGroup) { s.SecurityGroupIDs = []string{"sg-0123456789abcdef0"} },
	} {
		class := w.class()
		section := *class.Spec.EKSAutoscalingGroup
		mutate(&section)
		class.Spec.EKSAutoscalingGroup = &section
		err := d.ValidateCloud(ctx, class)
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, field)
		assert.ErrorContains(t, err, field)
		t.Logf("%s: %v", field, err)
	}
}

func TestBootstrapIsLookedUpFromEKS(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	configs := awscloud.NewAWSConfigs(awscloud.SDKConfig{Endpoint: w.endpoint})
	cfg, err := configs(ctx, region, testCredentials)
	require.NoError(t, err)
	created, err := eks.NewFromConfig(*cfg).CreateCluster(ctx, &eks.CreateClusterInput{Name: aws.String("prod"),
		RoleArn: aws.String("arn:aws:iam::123456789012:role/eks"), ResourcesVpcConfig: &ekstypes.VpcConfigRequest{SubnetIds: []string{w.subnet}}})
	require.NoError(t, err)
	endpoint := aws.ToString(created.Cluster.Endpoint)
	require.NotEmpty(t, endpoint)
	class := w.class()
	class.Spec.EKSAutoscalingGroup.Bootstrap = nil
	group := drivers.Group{Name: "looked-up", Owner: drivers.Owner{Cluster: "prod", Namespace: "a", Name: "b"}, Class: class, Replicas: 0, MaxReplicas: 1, TemplateHash: "h"}

	_, err = w.driver("prod").EnsureGroup(ctx, group)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "without a lookup the endpoint and CA are required")
	assert.ErrorContains(t, err, "spec.eksAutoscalingGroup.bootstrap")

	d := New(Options{Cluster: "prod", Clients: awscloud.ClientsFrom(configs), Clusters: NewClusterLookup(configs)})
	_, err = d.EnsureGroup(ctx, group)
	require.NoError(t, err)
	versions, err := w.ec2.DescribeLaunchTemplateVersions(ctx, &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateName: aws.String("looked-up")})
	require.NoError(t, err)
	userData, err := base64.StdEncoding.DecodeString(aws.ToString(versions.LaunchTemplateVersions[0].LaunchTemplateData.UserData))
	require.NoError(t, err)
	assert.Contains(t, string(userData), fmt.Sprintf("apiServerEndpoint: %q", endpoint))
	assert.Contains(t, string(userData), fmt.Sprintf("certificateAuthority: %q", aws.ToString(created.Cluster.CertificateAuthority.Data)))

	other := w.class()
	other.Spec.EKSAutoscalingGroup.Bootstrap, other.Spec.EKSAutoscalingGroup.ClusterName = nil, "staging"
	group.Name, group.Class = "no-cluster", other
	_, err = d.EnsureGroup(ctx, group)
	require.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
	assert.ErrorContains(t, err, "spec.eksAutoscalingGroup.clusterName: EKS cluster staging does not exist in us-east-1")
}
