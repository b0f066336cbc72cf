package resolve

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/pkg/nodeutil"
)

func asgClass(overrides ...string) *nodesetv1alpha1.NodeClass {
	return &nodesetv1alpha1.NodeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "asg"},
		Spec: nodesetv1alpha1.NodeClassSpec{
			Driver: nodesetv1alpha1.DriverEKSASG,
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
				ClusterName:  "prod",
				Region:       "eu-west-1",
				ImageID:      "ami-0123456789abcdef0",
				InstanceType: "m5.large",
				SubnetIDs:    []string{"subnet-0a1b2c3d"},
				Tags:         map[string]string{"team": "platform", "cost-center": "42"},
				MixedInstances: &nodesetv1alpha1.MixedInstancesPolicy{
					InstanceTypes: []string{"m5.large"}, OnDemandBaseCapacity: ptr.To[int32](1),
				},
			}},
			TenantOverrides: overrides,
		},
	}
}

func asgSet(section *nodesetv1alpha1.EKSAutoscalingGroup) *nodesetv1alpha1.NodeSet {
	return &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{
			NodeClassName:  "asg",
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: section},
		},
	}
}

func TestEffectiveSpec(t *testing.T) {
	tests := []struct {
		name       string
		class      *nodesetv1alpha1.NodeClass
		set        *nodesetv1alpha1.NodeSet
		restricted []string
		check      func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup)
	}{
		{
			name:  "no override keeps the class",
			class: asgClass(),
			set:   asgSet(nil),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, "m5.large", got.InstanceType)
			},
		},
		{
			name:  "allowed scalar replaces",
			class: asgClass("instanceType"),
			set:   asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{InstanceType: "m6i.xlarge"}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, "m6i.xlarge", got.InstanceType)
				assert.Equal(t, "ami-0123456789abcdef0", got.ImageID, "restricted fields keep the class value")
			},
		},
		{
			name:       "restricted scalar is refused",
			class:      asgClass("instanceType"),
			set:        asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{ImageID: "ami-0fedcba9876543210"}),
			restricted: []string{"spec.eksAutoscalingGroup.imageID"},
		},
		{
			name:  "allowed list replaces",
			class: asgClass("subnetIDs"),
			set:   asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{SubnetIDs: []string{"subnet-0e1f2a3b", "subnet-0f0f0f0f"}}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, []string{"subnet-0e1f2a3b", "subnet-0f0f0f0f"}, got.SubnetIDs)
			},
		},
		{
			name:  "allowed map: the tenant adds keys",
			class: asgClass("tags"),
			set:   asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Tags: map[string]string{"app": "shop", "team": "platform"}}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, map[string]string{"team": "platform", "cost-center": "42", "app": "shop"}, got.Tags,
					"a class key set to the class's own value is no change")
			},
		},
		{
			name:       "allowed map: a class key is refused, never dropped",
			class:      asgClass("tags"),
			set:        asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Tags: map[string]string{"team": "web", "app": "shop"}}),
			restricted: []string{"spec.eksAutoscalingGroup.tags.team"},
		},
		{
			name:  "a listed map key may be replaced",
			class: asgClass("tags", "tags.team"),
			set:   asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Tags: map[string]string{"team": "web"}}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, "web", got.Tags["team"])
				assert.Equal(t, "42", got.Tags["cost-center"])
			},
		},
		{
			name:  "listed map keys may hold dots, slashes and dashes",
			class: asgClass("tags.example.com/owner", "tags.cost-center"),
			set: asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Tags: map[string]string{
				"example.com/owner": "web", "cost-center": "7"}}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, map[string]string{"team": "platform", "cost-center": "7", "example.com/owner": "web"}, got.Tags)
			},
		},
		{
			name:       "a key beside a listed dotted key stays restricted",
			class:      asgClass("tags.example.com/owner"),
			set:        asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Tags: map[string]string{"example": "web", "example.com/other": "x"}}),
			restricted: []string{"spec.eksAutoscalingGroup.tags.example", "spec.eksAutoscalingGroup.tags.example.com/other"},
		},
		{
			name:  "nested field allowed, its siblings kept",
			class: asgClass("mixedInstances.instanceTypes"),
			set: asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{MixedInstances: &nodesetv1alpha1.MixedInstancesPolicy{
				InstanceTypes: []string{"c6i.large"}}}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, []string{"c6i.large"}, got.MixedInstances.InstanceTypes)
				assert.Equal(t, ptr.To[int32](1), got.MixedInstances.OnDemandBaseCapacity)
			},
		},
		{
			name:  "nested restricted field is refused",
			class: asgClass("mixedInstances.instanceTypes"),
			set: asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{MixedInstances: &nodesetv1alpha1.MixedInstancesPolicy{
				OnDemandBaseCapacity: ptr.To[int32](0)}}),
			restricted: []string{"spec.eksAutoscalingGroup.mixedInstances.onDemandBaseCapacity"},
		},
		{
			name:  "a value the schema defaulted in the tenant's section is no override",
			class: asgClass("bootstrap.kubeletExtraArgs"),
			set: asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
				Format: nodesetv1alpha1.BootstrapNodeConfig, KubeletExtraArgs: []string{"--max-pods=20"}}}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, []string{"--max-pods=20"}, got.Bootstrap.KubeletExtraArgs)
			},
		},
		{
			name:  "a restricted field set to the class's own value is no override",
			class: asgClass("instanceType"),
			set:   asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{ImageID: "ami-0123456789abcdef0"}),
			check: func(t *testing.T, got *nodesetv1alpha1.EKSAutoscalingGroup) {
				assert.Equal(t, "ami-0123456789abcdef0", got.ImageID)
			},
		},
		{
			name:       "every restricted field is named",
			class:      asgClass(),
			set:        asgSet(&nodesetv1alpha1.EKSAutoscalingGroup{Region: "us-east-1", KeyName: "mine"}),
			restricted: []string{"spec.eksAutoscalingGroup.keyName", "spec.eksAutoscalingGroup.region"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.class.DeepCopy()
			got, err := EffectiveSpec(tt.class, tt.set)
			assert.Equal(t, before, tt.class, "the class must not be mutated")
			if tt.restricted != nil {
				var restrictedErr *RestrictedFieldError
				require.True(t, errors.As(err, &restrictedErr), "want RestrictedFieldError, got %v", err)
				assert.Equal(t, tt.restricted, restrictedErr.Fields)
				assert.Contains(t, err.Error(), "restricted by NodeClass asg")
				return
			}
			require.NoError(t, err)
			tt.check(t, got.EKSAutoscalingGroup)
		})
	}
}

func TestEffectiveSpecWrongSection(t *testing.T) {
	set := asgSet(nil)
	set.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{InstanceType: "x"}
	_, err := EffectiveSpec(asgClass("instanceType"), set)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.simulated does not match NodeClass asg")
}

func TestTemplateHash(t *testing.T) {
	class := asgClass("instanceType")
	set := asgSet(nil)
	spec, err := EffectiveSpec(class, set)
	require.NoError(t, err)
	base := TemplateHash(&spec, set)
	assert.Equal(t, base, TemplateHash(&spec, set.DeepCopy()), "hash is deterministic")

	// A restricted class value (a new AMI) changes every set's hash.
	newAMI := class.DeepCopy()
	newAMI.Spec.EKSAutoscalingGroup.ImageID = "ami-0fedcba9876543210"
	spec2, err := EffectiveSpec(newAMI, set)
	require.NoError(t, err)
	assert.NotEqual(t, base, TemplateHash(&spec2, set))

	// So does the tenant's template; scaling does not.
	labelled := set.DeepCopy()
	labelled.Spec.Template.Labels = map[string]string{"tier": "web"}
	assert.NotEqual(t, base, TemplateHash(&spec, labelled))
	scaled := set.DeepCopy()
	scaled.Spec.Replicas = ptr.To[int32](7)
	assert.Equal(t, base, TemplateHash(&spec, scaled))

	// The simulated cloud's room is no machine's shape: giving a class
	// room, or setting none, rolls no Node; its capacity does.
	sim := nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated,
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{InstanceType: "sim.small"}}}
	unlimited := TemplateHash(&sim, set)
	sim.Simulated.MaxMachines = ptr.To[int32](3)
	assert.Equal(t, unlimited, TemplateHash(&sim, set), "maxMachines set")
	sim.Simulated.MaxMachines = ptr.To[int32](5)
	assert.Equal(t, unlimited, TemplateHash(&sim, set), "maxMachines raised")
	assert.Equal(t, int32(5), *sim.Simulated.MaxMachines, "the caller's spec is not changed")
	sim.Simulated.InstanceType = "sim.large"
	assert.NotEqual(t, unlimited, TemplateHash(&sim, set), "instanceType")
}

func TestNodeLabelsAndTaints(t *testing.T) {
	spec := nodesetv1alpha1.NodeClassSpec{
		Driver:  nodesetv1alpha1.DriverSimulated,
		Tenancy: nodesetv1alpha1.TenancyDedicated,
		NodeTemplate: nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"pool": "general", "tier": "class"},
			Taints: []nodesetv1alpha1.Taint{{Key: "gpu", Value: "class", Effect: "NoSchedule"}},
		},
	}
	set := &nodesetv1alpha1.NodeSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
		Spec: nodesetv1alpha1.NodeSetSpec{Template: nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"tier": "web"},
			Taints: []nodesetv1alpha1.Taint{{Key: "gpu", Value: "set", Effect: "NoSchedule"}},
		}},
	}
	labels := NodeLabels(&spec, "sim", set, "abc")
	assert.Equal(t, map[string]string{
		"pool": "general", "tier": "web",
		nodesetv1alpha1.LabelNodeSetNamespace: "team-a", nodesetv1alpha1.LabelNodeSet: "web",
		nodesetv1alpha1.LabelSeal:      nodeutil.Seal("team-a", "web", "sim"),
		nodesetv1alpha1.LabelNodeClass: "sim", nodesetv1alpha1.LabelTemplateHash: "abc",
		nodesetv1alpha1.LabelTenant: "team-a", nodesetv1alpha1.LabelTenantRestricted: "team-a",
	}, labels)
	assert.True(t, Selector(set).Matches(labelsSet(labels)))
	assert.Equal(t, []corev1.Taint{
		{Key: "gpu", Value: "set", Effect: corev1.TaintEffectNoSchedule},
		{Key: nodesetv1alpha1.LabelTenant, Value: "team-a", Effect: corev1.TaintEffectNoSchedule},
	}, NodeTaints(&spec, set))
}
func labelsSet(m map[string]string) labels.Set { return labels.Set(m) }

// TestNewNodeStartupTaintsAndCapacity: a new Node carries both startup
// taints (nodeset's and the one cluster-autoscaler knows by its prefix),
// and the machine's capacity in its status when the set's published
// capacity is for the Node's template, never another template's.
func TestNewNodeStartupTaintsAndCapacity(t *testing.T) {
	spec := &nodesetv1alpha1.NodeClassSpec{}
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
	set.Status.Capacity = &nodesetv1alpha1.TemplateCapacity{TemplateHash: "h1", NodeCapacity: nodesetv1alpha1.NodeCapacity{
		Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}}}
	for _, tc := range []struct {
		name, hash string
		cpu        string
	}{
		{"current template", "h1", "2"},
		{"another template", "h2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := NewNode(spec, "sim", set, tc.hash)
			var keys []string
			for _, taint := range node.Spec.Taints {
				assert.Equal(t, corev1.TaintEffectNoExecute, taint.Effect)
				keys = append(keys, taint.Key)
			}
			assert.ElementsMatch(t, []string{nodesetv1alpha1.TaintUnregistered, "startup-taint.cluster-autoscaler.kubernetes.io/nodeset-unregistered"}, keys)
			assert.True(t, nodeutil.HasStartupTaint(node))
			assert.Empty(t, nodeutil.WithoutStartupTaints(node.Spec.Taints), "lifted together")
			if tc.cpu == "" {
				assert.Empty(t, node.Status.Capacity)
				return
			}
			assert.Equal(t, tc.cpu, node.Status.Capacity.Cpu().String())
			assert.Equal(t, tc.cpu, node.Status.Allocatable.Cpu().String(), "allocatable defaults to the capacity")
		})
	}
}

// TestAcceleratorLabel: a Node whose machine has a GPU carries the label
// cluster-autoscaler reads as its GPU label, from creation; one without
// does not.
func TestAcceleratorLabel(t *testing.T) {
	spec := &nodesetv1alpha1.NodeClassSpec{}
	for _, tc := range []struct {
		name      string
		resources corev1.ResourceList
		want      string
	}{
		{"an NVIDIA GPU", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), "nvidia.com/gpu": resource.MustParse("1")}, "nvidia.com-gpu"},
		{"an AMD GPU", corev1.ResourceList{"amd.com/gpu": resource.MustParse("2")}, "amd.com-gpu"},
		{"no GPU", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}, ""},
		{"a GPU count of 0", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
			set.Status.Capacity = &nodesetv1alpha1.TemplateCapacity{TemplateHash: "h1", NodeCapacity: nodesetv1alpha1.NodeCapacity{Resources: tc.resources}}
			node := NewNode(spec, "gpu", set, "h1")
			got, ok := node.Labels[nodesetv1alpha1.LabelAccelerator]
			assert.Equal(t, tc.want != "", ok)
			assert.Equal(t, tc.want, got)
			assert.NoError(t, metav1validation.ValidateLabels(node.Labels, field.NewPath("labels")).ToAggregate())
		})
	}
}
