package resolve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTenantTagsOtherProgramsActOn: a class that lets tenants add tags
// (tenantOverrides: tags) hands them to the group, its launch template and
// its instances. Tags that tell cluster-autoscaler's auto-discovery to take
// the group (k8s.io/cluster-autoscaler/enabled and .../<cluster>, and its
// node-template/ tags), that tell the cloud controller manager and the
// load balancer controller which cluster an instance is of
// (kubernetes.io/cluster/<name>, KubernetesCluster), and EKS's and AWS's own
// (eks:, aws:) are refused, naming the field, in whatever case; other keys
// stay the tenant's.
func TestTenantTagsOtherProgramsActOn(t *testing.T) {
	asgClass := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "batch"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverEKSASG, TenantOverrides: []string{"tags"},
			DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{
				ClusterName: "prod", Region: "eu-west-1", Tags: map[string]string{"cost-center": "platform"}}}}}
	managedClass := &nodesetv1alpha1.NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "managed"},
		Spec: nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverEKSManaged, TenantOverrides: []string{"tags"},
			DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{
				ClusterName: "prod", Region: "eu-west-1", NodeRole: "arn:aws:iam::123456789012:role/node"}}}}
	asgSet := func(tags map[string]string) *nodesetv1alpha1.NodeSet {
		return &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "batch",
				DriverSections: nodesetv1alpha1.DriverSections{EKSAutoscalingGroup: &nodesetv1alpha1.EKSAutoscalingGroup{Tags: tags}}}}
	}
	managedSet := func(tags map[string]string) *nodesetv1alpha1.NodeSet {
		return &nodesetv1alpha1.NodeSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a"},
			Spec: nodesetv1alpha1.NodeSetSpec{NodeClassName: "managed",
				DriverSections: nodesetv1alpha1.DriverSections{EKSManagedNodeGroup: &nodesetv1alpha1.EKSManagedNodeGroup{Tags: tags}}}}
	}
	tests := []struct {
		name  string
		class *nodesetv1alpha1.NodeClass
		set   *nodesetv1alpha1.NodeSet
		field string // "" when the set is fine
	}{
		{"cluster-autoscaler's auto-discovery", asgClass, asgSet(map[string]string{"k8s.io/cluster-autoscaler/enabled": "true"}),
			`spec.eksAutoscalingGroup.tags key "k8s.io/cluster-autoscaler/enabled"`},
		{"cluster-autoscaler's cluster", asgClass, asgSet(map[string]string{"k8s.io/cluster-autoscaler/prod": "owned"}),
			`spec.eksAutoscalingGroup.tags key "k8s.io/cluster-autoscaler/prod"`},
		{"cluster-autoscaler's node template", asgClass, asgSet(map[string]string{"k8s.io/cluster-autoscaler/node-template/label/example.com/pool": "gpu"}),
			`spec.eksAutoscalingGroup.tags key "k8s.io/cluster-autoscaler/node-template/label/example.com/pool"`},
		{"another cluster's instances", asgClass, asgSet(map[string]string{"kubernetes.io/cluster/staging": "owned"}),
			`spec.eksAutoscalingGroup.tags key "kubernetes.io/cluster/staging"`},
		{"this cluster's, shared", asgClass, asgSet(map[string]string{"kubernetes.io/cluster/prod": "shared"}),
			`spec.eksAutoscalingGroup.tags key "kubernetes.io/cluster/prod"`},
		{"the former cluster key", asgClass, asgSet(map[string]string{"KubernetesCluster": "staging"}),
			`spec.eksAutoscalingGroup.tags key "KubernetesCluster"`},
		{"EKS's own", asgClass, asgSet(map[string]string{"eks:cluster-name": "staging"}),
			`spec.eksAutoscalingGroup.tags key "eks:cluster-name"`},
		{"another case", asgClass, asgSet(map[string]string{"K8s.io/cluster-autoscaler/enabled": "true"}),
			`spec.eksAutoscalingGroup.tags key "K8s.io/cluster-autoscaler/enabled"`},
		{"a node group's", managedClass, managedSet(map[string]string{"k8s.io/cluster-autoscaler/enabled": "true"}),
			`spec.eksManagedNodeGroup.tags key "k8s.io/cluster-autoscaler/enabled"`},
		{"a node group's nodeset tag", managedClass, managedSet(map[string]string{"nodeset.dev/nodeset-uid": "x"}),
			`spec.eksManagedNodeGroup.tags key "nodeset.dev/nodeset-uid"`},
		{"the tenant's own", asgClass, asgSet(map[string]string{"team": "a", "example.com/owner": "a", "Name": "web", "k8s.io.example.com/x": "y"}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := TenantErrors(tt.set)
			_, err := ProvisioningSpec(nil, tt.class, tt.set)
			if tt.field == "" {
				assert.Empty(t, problems)
				assert.NoError(t, err)
				return
			}
			if assert.Len(t, problems, 1) {
				assert.Contains(t, problems[0], tt.field)
			}
			assert.Error(t, err, "no group is made or changed for such a set")
		})
	}

	// The admin's class may set them: the class's own tags are not the tenant's.
	admin := asgClass.DeepCopy()
	admin.Spec.EKSAutoscalingGroup.Tags["k8s.io/cluster-autoscaler/enabled"] = "true"
	_, err := ProvisioningSpec(nil, admin, asgSet(map[string]string{"team": "a"}))
	assert.NoError(t, err)
}
