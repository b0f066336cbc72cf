package autoscaler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestDedicatedTemplateNodeCarriesTheRestrictedTenantLabel: a tenant's
// pods select node-restriction.kubernetes.io/nodeset-tenant=<namespace> and
// tolerate its taint; cluster-autoscaler scales a Dedicated set up from
// zero only if its template node carries that label, with the set's
// namespace, whatever label the class's capacity reports. A Shared set's
// template carries none.
func TestDedicatedTemplateNodeCarriesTheRestrictedTenantLabel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenancy nodesetv1alpha1.Tenancy
		want    string
	}{
		{"Dedicated", nodesetv1alpha1.TenancyDedicated, testSet(0).Namespace},
		{"Shared", nodesetv1alpha1.TenancyShared, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := testClass()
			class.Spec.Tenancy = tc.tenancy
			class.Status.Capacity.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			if tc.want != "" {
				class.Status.Capacity.Labels = map[string]string{nodesetv1alpha1.LabelTenantRestricted: "someone-else"}
			}
			f := newClassFixture(t, class, nil, testSet(0))
			node, err := f.server.TemplateNode(testSet(0))
			require.NoError(t, err)
			if tc.want == "" {
				assert.NotContains(t, node.Labels, nodesetv1alpha1.LabelTenantRestricted)
				assert.NotContains(t, node.Labels, nodesetv1alpha1.LabelTenant)
				return
			}
			assert.Equal(t, tc.want, node.Labels[nodesetv1alpha1.LabelTenantRestricted])
			assert.Equal(t, tc.want, node.Labels[nodesetv1alpha1.LabelTenant])
			assert.Contains(t, node.Spec.Taints, corev1.Taint{Key: nodesetv1alpha1.LabelTenant, Value: tc.want, Effect: corev1.TaintEffectNoSchedule})
		})
	}
}
