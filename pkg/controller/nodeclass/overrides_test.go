package nodeclass

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
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
		{"unknown field", asg, []string{"instanceTypes"}, `spec.tenantOverrides[0]: "instanceTypes" is not a field`},
		{"unknown nested", asg, []string{"instanceType", "mixedInstances.types"}, `spec.tenantOverrides[1]: "mixedInstances.types"`},
		{"below a scalar", asg, []string{"instanceType.size"}, "is not a field"},
		{"simulated", nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{}}, []string{"capacity", "instanceType"}, ""},
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
		return &nodesetv1alpha1.NodeClassSpec{DriverSections: sim,
			AllowedNamespaces: &nodesetv1alpha1.AllowedNamespaces{From: nodesetv1alpha1.NamespacesFromSelector, Selector: s}}
	}
	assert.NoError(t, SpecErrors(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"example.com/team": "a"}})))
	err := SpecErrors(selector(&metav1.LabelSelector{MatchLabels: map[string]string{"bad key": "a"}}))
	assert.ErrorContains(t, err, "spec.allowedNamespaces.selector.matchLabels")
	assert.True(t, errors.Is(err, drivers.ErrInvalidConfiguration))
	err = SpecErrors(selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "In"}}}))
	assert.ErrorContains(t, err, "spec.allowedNamespaces.selector.matchExpressions[0].values")
	err = SpecErrors(&nodesetv1alpha1.NodeClassSpec{DriverSections: sim, TenantOverrides: []string{"cpus"}})
	assert.ErrorContains(t, err, "spec.tenantOverrides[0]", "overrides are checked too")
}
