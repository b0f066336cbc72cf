package resolve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTemplateConflictsThroughTheDriverSection: the labels and taints of a
// driver section reach the Node too (the kubelet reports them, EKS passes
// them to it), so what the class stamps holds against them as against the
// template; EKS's spelling of an effect is the same effect.
func TestTemplateConflictsThroughTheDriverSection(t *testing.T) {
	class := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "spot"}}
	class.Spec.NodeTemplate = nodesetv1alpha1.NodeTemplate{
		Labels: map[string]string{"lifecycle": "spot"},
		Taints: []nodesetv1alpha1.Taint{{Key: "example.com/spot", Value: "true", Effect: "NoSchedule"}},
	}
	tests := []struct {
		name     string
		sections nodesetv1alpha1.DriverSections
		want     []string // substrings of the one problem expected; nil for none
	}{
		{"simulated labels of its own and the class's value", nodesetv1alpha1.DriverSections{
			Simulated: &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"lifecycle": "spot", "tier": "web"}}}, nil},
		{"simulated labels change the class's", nodesetv1alpha1.DriverSections{
			Simulated: &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"lifecycle": "on-demand"}}},
			[]string{`spec.simulated.labels["lifecycle"] "on-demand"`, `NodeClass spot sets it to "spot"`}},
		{"managed node group labels change the class's", nodesetv1alpha1.DriverSections{
			EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{Labels: map[string]string{"lifecycle": "on-demand"}}},
			[]string{`spec.eksManagedNodeGroup.labels["lifecycle"]`}},
		{"managed node group taint changes the class's value", nodesetv1alpha1.DriverSections{
			EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{Taints: []nodesetv1alpha1.ManagedTaint{
				{Key: "example.com/spot", Value: "false", Effect: "NO_SCHEDULE"}}}},
			[]string{"spec.eksManagedNodeGroup.taints[0] example.com/spot=false:NO_SCHEDULE", "example.com/spot=true:NoSchedule"}},
		{"managed node group taint of another effect", nodesetv1alpha1.DriverSections{
			EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{Taints: []nodesetv1alpha1.ManagedTaint{
				{Key: "example.com/spot", Value: "false", Effect: "NO_EXECUTE"}}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
			set.Spec.DriverSections = tt.sections
			got := TemplateConflicts(class, set)
			if tt.want == nil {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1) {
				for _, want := range tt.want {
					assert.Contains(t, got[0], want)
				}
			}
		})
	}
}

// TestTemplateConflictsWithTheClassesDriverSection: what a class's own
// driver section puts on every Node (eksManagedNodeGroup.labels and
// taints, simulated.labels) is stamped as its nodeTemplate is: the set's
// template may repeat it and add to it, not change it. The template's keys
// win over what the machine reports, so without the check a template label
// would replace the class's lifecycle=spot on the Node.
func TestTemplateConflictsWithTheClassesDriverSection(t *testing.T) {
	managed := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "managed-spot"}}
	managed.Spec.EKSManagedNodeGroup = &nodesetv1alpha1.EKSManagedNodeGroup{
		Labels: map[string]string{"example.com/lifecycle": "spot"},
		Taints: []nodesetv1alpha1.ManagedTaint{{Key: "example.com/gpu", Value: "true", Effect: "NO_SCHEDULE"}},
	}
	simulated := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "sim-spot"}}
	simulated.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{"example.com/lifecycle": "spot"}}
	tests := []struct {
		name     string
		class    *nodesetv1alpha1.NodeClass
		template nodesetv1alpha1.NodeTemplate
		want     []string // substrings of the problems expected, one each; nil for none
	}{
		{"the same values, and labels and taints of the set's own", managed, nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"example.com/lifecycle": "spot", "tier": "web"},
			Taints: []nodesetv1alpha1.Taint{{Key: "example.com/gpu", Value: "true", Effect: "NoSchedule"},
				{Key: "example.com/gpu", Value: "mine", Effect: "NoExecute"}}}, nil},
		{"a managed node group's label changed", managed, nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"example.com/lifecycle": "on-demand"}},
			[]string{`spec.template.labels["example.com/lifecycle"] "on-demand": NodeClass managed-spot sets it to "spot"`}},
		{"a managed node group's taint changed", managed, nodesetv1alpha1.NodeTemplate{
			Taints: []nodesetv1alpha1.Taint{{Key: "example.com/gpu", Value: "mine", Effect: "NoSchedule"}}},
			[]string{"spec.template.taints[0] example.com/gpu=mine:NoSchedule: NodeClass managed-spot puts example.com/gpu=true:NoSchedule"}},
		{"a simulated label changed", simulated, nodesetv1alpha1.NodeTemplate{
			Labels: map[string]string{"example.com/lifecycle": "on-demand"}},
			[]string{`NodeClass sim-spot sets it to "spot"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
			set.Spec.Template = tt.template
			got := TemplateConflicts(tt.class, set)
			if assert.Len(t, got, len(tt.want), "%v", got) {
				for i, want := range tt.want {
					assert.Contains(t, got[i], want)
				}
			}
		})
	}
}
