package nodeclass

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/resolve"
)

func TestTenantOverrideErrors(t *testing.T) {
	asg := nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{}}
	tests := []struct {
		name      string
		sections  nodesetv1alpha1.DriverSections
		overrides []string
		wantErr   string
	}{
		{"scalar", asg, []string{"instanceType"}, ""},
		{"nested", asg, []string{"mixedInstances.instanceTypes", "metadataOptions.httpTokens"}, ""},
		{"list of objects", asg, []string{"blockDevices"}, ""},
		{"map key", asg, []string{"tags", "tags.team"}, ""},
		{"map keys with dots, slashes and dashes", asg, []string{"tags.example.com/owner", "tags.cost-center", "tags.kubernetes.io/cluster/prod"}, ""},
		{"map key with dots below a section field", nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}, []string{"capacity.nvidia.com/gpu"}, ""},
		{"unknown field", asg, []string{"instanceTypes"}, `spec.tenantOverrides[0]: "instanceTypes" is not a field`},
		{"unknown nested", asg, []string{"instanceType", "mixedInstances.types"}, `spec.tenantOverrides[1]: "mixedInstances.types"`},
		{"below a scalar", asg, []string{"instanceType.size"}, "is not a field"},
		{"simulated", nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}, []string{"capacity", "instanceType"}, ""},
		{"map key below a section field", nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}, []string{"capacity.cpu"}, ""},
		{"inside a list of objects", asg, []string{"blockDevices.volumeSize"},
			`spec.tenantOverrides[0]: "blockDevices.volumeSize" is a field of the elements of the list blockDevices: list elements cannot be overridden piecewise; list the whole list (blockDevices) instead`},
		{"inside a nested list", asg, []string{"instanceType", "mixedInstances.instanceTypes.first"}, "spec.tenantOverrides[1]: \"mixedInstances.instanceTypes.first\" is a field of the elements of the list mixedInstances.instanceTypes"},
		{"inside a managed list", nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{}}, []string{"taints.key"}, "list the whole list (taints) instead"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := TenantOverrideErrors(&nodesetv1alpha1.NodeClassSpec{DriverSections: tt.sections, TenantOverrides: tt.overrides})
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
			assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
		})
	}
}

func TestSpecErrorsSelector(t *testing.T) {
	sim := nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}
	selector := func(s *metav1.LabelSelector) *nodesetv1alpha1.NodeClassSpec {
		return &nodesetv1alpha1.NodeClassSpec{Driver: driverOf(sim), DriverSections: sim,
			AllowedNamespaces: &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector, Selector: s}}
	}
	assert.NoError(t, SpecErrors(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"example.com/team": "a"}})))
	err := SpecErrors(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"bad key": "a"}}))
	assert.ErrorContains(t, err, "spec.allowedNamespaces.selector.matchLabels")
	assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
	err = SpecErrors(selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "In"}}}))
	assert.ErrorContains(t, err, "spec.allowedNamespaces.selector.matchExpressions[0].values")
	err = SpecErrors(&nodesetv1alpha1.NodeClassSpec{Driver: driverOf(sim), DriverSections: sim, TenantOverrides: []string{"cpus"}})
	assert.ErrorContains(t, err, "spec.tenantOverrides[0]", "overrides are checked too")
	err = SpecErrors(&nodesetv1alpha1.NodeClassSpec{Driver: "out-of-tree", DriverSections: sim})
	assert.ErrorContains(t, err, "spec.simulated: is only for spec.driver simulated", "a class that got past the schema is Valid=False")
}

func TestSpecErrorsNodeTemplate(t *testing.T) {
	sim := nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}
	taint := func(key, value string) []nodesetv1alpha1.Taint {
		return []nodesetv1alpha1.Taint{{Key: key, Value: value, Effect: "NoSchedule"}}
	}
	tests := []struct {
		name     string
		template nodesetv1alpha1.NodeTemplate
		sections nodesetv1alpha1.DriverSections
		wantErr  []string
	}{
		{"valid", nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"example.com/tier": "gold"}, Annotations: map[string]string{"a": "b"},
			Taints: taint("example.com/spot", "true")}, sim, nil},
		{"label key", nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"tier!": "gold"}}, sim, []string{"spec.nodeTemplate.labels", `"tier!"`}},
		{"label value", nodesetv1alpha1.NodeTemplate{Labels: map[string]string{"tier": strings.Repeat("g", 64)}}, sim, []string{"spec.nodeTemplate.labels", "must be no more than 63"}},
		{"annotation key", nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{"a b": "c"}}, sim, []string{"spec.nodeTemplate.annotations"}},
		{"annotations over 256KiB", nodesetv1alpha1.NodeTemplate{Annotations: map[string]string{"a": strings.Repeat("é", 131072)}}, sim,
			[]string{"spec.nodeTemplate.annotations", "262144 bytes"}},
		{"taint key prefix", nodesetv1alpha1.NodeTemplate{Taints: taint(strings.Repeat("a", 254)+"/b", "")}, sim, []string{"spec.nodeTemplate.taints[0].key", "prefix part"}},
		{"taint key name", nodesetv1alpha1.NodeTemplate{Taints: taint(strings.Repeat("a", 64), "")}, sim, []string{"spec.nodeTemplate.taints[0].key", "name part"}},
		{"taint value", nodesetv1alpha1.NodeTemplate{Taints: taint("a", "b c")}, sim, []string{"spec.nodeTemplate.taints[0].value"}},
		{"simulated labels", nodesetv1alpha1.NodeTemplate{}, nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"a": "b c"}}},
			[]string{"spec.simulated.labels"}},
		{"managed node group labels and taints", nodesetv1alpha1.NodeTemplate{}, nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{
			Labels: map[string]string{"/": "a"}, Taints: []nodesetv1alpha1.ManagedTaint{{Key: "a", Value: "b c", Effect: "NO_SCHEDULE"}}}},
			[]string{"spec.eksManagedNodeGroup.labels", "spec.eksManagedNodeGroup.taints[0].value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SpecErrors(&nodesetv1alpha1.NodeClassSpec{Driver: driverOf(tt.sections), DriverSections: tt.sections, NodeTemplate: tt.template})
			if tt.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
			for _, want := range tt.wantErr {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestSectionErrors(t *testing.T) {
	tests := []struct {
		name     string
		driver   string
		sections nodesetv1alpha1.DriverSections
		wantErr  string
	}{
		{"its own driver", nodesetv1alpha1.DriverSimulated, nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}, ""},
		{"out-of-tree with parameters only", "example.com-metal", nodesetv1alpha1.DriverSections{}, ""},
		{"out-of-tree with a built-in section", "foo", nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}},
			`spec.simulated: is only for spec.driver simulated, not "foo"; an out-of-tree driver is configured through spec.parameters`},
		{"another built-in driver", nodesetv1alpha1.DriverEKSASG, nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{}},
			"spec.dockerMachine: is only for spec.driver docker-machine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SectionErrors(&nodesetv1alpha1.NodeClassSpec{Driver: tt.driver, DriverSections: tt.sections})
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
			assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
		})
	}
}

// driverOf is the built-in driver whose section is set.
func driverOf(sections nodesetv1alpha1.DriverSections) string {
	switch {
	case sections.Simulated != nil:
		return nodesetv1alpha1.DriverSimulated
	case sections.DockerMachine != nil:
		return nodesetv1alpha1.DriverDockerMachine
	case sections.EKSAutoscalingGroup != nil:
		return nodesetv1alpha1.DriverEKSASG
	case sections.EKSManagedNodeGroup != nil:
		return nodesetv1alpha1.DriverEKSManaged
	}
	return ""
}

// TestEveryListedOverrideCanBeUsed: a tenantOverrides entry below an object
// the class does not set, beside a field the schema requires in that
// object (mixedInstances.instanceTypes, interruptions.queueURL,
// provisioning.method), is one no NodeSet can use: the NodeSet must set the
// required field, and setting a field the class leaves out is an override
// of it. Such a class is Valid=False naming the entry and what to list,
// rather than valid with a boundary that refuses every tenant. Where the
// class sets the object, the tenant repeats the class's value and the
// entry works.
func TestEveryListedOverrideCanBeUsed(t *testing.T) {
	asg := func(mixed *nodesetv1alpha1.MixedInstancesPolicy, interruptions *nodesetv1alpha1.EKSInterruptions) nodesetv1alpha1.DriverSections {
		return nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Region: "eu-west-1",
			InstanceType: "m5.large", MixedInstances: mixed, Interruptions: interruptions}}
	}
	classMixed := &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: []string{"m5.large", "m6i.large"}}
	tenantMixed := func(types ...string) nodesetv1alpha1.DriverSections {
		return nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
			MixedInstances: &nodesetv1alpha1.MixedInstancesPolicy{InstanceTypes: types, SpotAllocationStrategy: "capacity-optimized"}}}
	}
	const queue = "https://sqs.eu-west-1.amazonaws.com/123456789012/interruptions"
	tenantRebalance := nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
		Interruptions: &nodesetv1alpha1.EKSInterruptions{QueueURL: queue, Rebalance: nodesetv1alpha1.RebalanceReplaceFirst}}}
	docker := func(provisioning *nodesetv1alpha1.MachineProvisioning) nodesetv1alpha1.DriverSections {
		return nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{DriverName: "generic", Provisioning: provisioning}}
	}
	tenantScript := docker(&nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData, Script: "#!/bin/sh\necho join\n"})
	tests := []struct {
		name      string
		class     nodesetv1alpha1.DriverSections
		overrides []string
		tenant    nodesetv1alpha1.DriverSections
		wantErr   []string // the class's refusal; none: the tenant's NodeSet is within the boundary
	}{
		{"below mixedInstances the class leaves out", asg(nil, nil), []string{"mixedInstances.spotAllocationStrategy"}, tenantMixed("c5.large"),
			[]string{`spec.tenantOverrides[0]: "mixedInstances.spotAllocationStrategy"`, "mixedInstances.instanceTypes", "the class does not set mixedInstances"}},
		{"below mixedInstances the class sets", asg(classMixed, nil), []string{"mixedInstances.spotAllocationStrategy"}, tenantMixed("m5.large", "m6i.large"), nil},
		{"beside the required field, listed", asg(nil, nil), []string{"mixedInstances.spotAllocationStrategy", "mixedInstances.instanceTypes"}, tenantMixed("c5.large"), nil},
		{"the whole object", asg(nil, nil), []string{"mixedInstances"}, tenantMixed("c5.large"), nil},
		{"below interruptions the class leaves out", asg(nil, nil), []string{"interruptions.rebalance"}, tenantRebalance,
			[]string{`"interruptions.rebalance"`, "interruptions.queueURL"}},
		{"below provisioning the class leaves out", docker(nil), []string{"provisioning.script"}, tenantScript,
			[]string{`"provisioning.script"`, "provisioning.method"}},
		{"below provisioning the class sets", docker(&nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData}), []string{"provisioning.script"}, tenantScript, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: nodesetv1alpha1.NodeClassSpec{
				Driver: driverOf(tt.class), DriverSections: tt.class, TenantOverrides: tt.overrides}}
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "team-a"},
				Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "c", DriverSections: tt.tenant}}
			_, overrideErr := resolve.EffectiveSpec(class, set)
			err := SpecErrors(&class.Spec)
			if tt.wantErr != nil {
				var restricted *resolve.RestrictedFieldError
				require.ErrorAs(t, overrideErr, &restricted, "no NodeSet can use the entry")
				assert.Contains(t, restricted.Fields[0], tt.wantErr[1], "the field the schema requires is an override")
				require.Error(t, err, "a boundary no NodeSet can use")
				assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
				for _, want := range tt.wantErr {
					assert.Contains(t, err.Error(), want)
				}
				return
			}
			require.NoError(t, err)
			assert.NoError(t, overrideErr, "the listed field can be set")
		})
	}
}
