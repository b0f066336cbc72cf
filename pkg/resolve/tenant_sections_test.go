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
