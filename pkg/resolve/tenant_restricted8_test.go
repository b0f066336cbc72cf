package resolve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestDedicatedNodesCarryTheRestrictedTenantLabel: a Dedicated class's
// Nodes carry the tenant label no kubelet can set or change, beside
// nodeset.dev/tenant (which a Node's own kubelet can), whatever the
// templates say; a Shared class's Nodes carry neither.
func TestDedicatedNodesCarryTheRestrictedTenantLabel(t *testing.T) {
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ml-research"}}
	set.Spec.Template.Labels = map[string]string{"tier": "web"}
	for _, tc := range []struct {
		name    string
		tenancy nodesetv1alpha1.Tenancy
		want    string
	}{
		{"Dedicated", nodesetv1alpha1.TenancyDedicated, "ml-research"},
		{"Shared", nodesetv1alpha1.TenancyShared, ""},
		{"Shared by default", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The class's own word on the key loses to nodeset's.
			spec := &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated, Tenancy: tc.tenancy}
			spec.NodeTemplate.Labels = map[string]string{"pool": "gpu"}
			if tc.want != "" {
				spec.NodeTemplate.Labels[nodesetv1alpha1.LabelTenantRestricted] = "team-b"
			}
			for _, labels := range []map[string]string{NodeLabels(spec, "gpu", set, "h1"), NewNode(spec, "gpu", set, "h1").Labels} {
				got, ok := labels[nodesetv1alpha1.LabelTenantRestricted]
				assert.Equal(t, tc.want != "", ok, "restricted label present")
				assert.Equal(t, tc.want, got)
				assert.Equal(t, tc.want, labels[nodesetv1alpha1.LabelTenant])
				assert.Equal(t, "web", labels["tier"])
			}
		})
	}
}

// TestTheRestrictedTenantLabelIsTheAdmins: no NodeSet sets the restricted
// tenant label, by any path that reaches a Node (it is in the
// kubernetes.io domain).
func TestTheRestrictedTenantLabelIsTheAdmins(t *testing.T) {
	assert.NotEmpty(t, ReservedForTenants(nodesetv1alpha1.LabelTenantRestricted))
	set := &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"}}
	set.Spec.Template.Labels = map[string]string{nodesetv1alpha1.LabelTenantRestricted: "ml-research"}
	set.Spec.Simulated = &nodesetv1alpha1.SimulatedMachine{Labels: map[string]string{nodesetv1alpha1.LabelTenantRestricted: "ml-research"}}
	set.Spec.EKSManagedNodeGroup = &nodesetv1alpha1.EKSManagedNodeGroup{Labels: map[string]string{nodesetv1alpha1.LabelTenantRestricted: "ml-research"}}
	set.Spec.EKSAutoscalingGroup = &nodesetv1alpha1.EKSAutoscalingGroup{Bootstrap: &nodesetv1alpha1.EKSBootstrap{
		KubeletExtraArgs: []string{"--node-labels=" + nodesetv1alpha1.LabelTenantRestricted + "=ml-research"}}}
	problems := TenantErrors(set)
	for _, field := range []string{"spec.template.labels", "spec.simulated.labels", "spec.eksManagedNodeGroup.labels", "spec.eksAutoscalingGroup.bootstrap.kubeletExtraArgs"} {
		found := false
		for _, p := range problems {
			if strings.Contains(p, field) {
				found = true
			}
		}
		assert.True(t, found, "%s refused; problems: %q", field, problems)
	}
}
