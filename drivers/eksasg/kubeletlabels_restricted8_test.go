package eksasg

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTheKubeletIsNeverGivenTheRestrictedTenantLabel: a Dedicated set's
// Nodes carry node-restriction.kubernetes.io/nodeset-tenant, which the
// NodeRestriction admission plugin refuses from a kubelet (at
// registration too) and the kubelet itself refuses in --node-labels: in
// the bootstrap's flags it would keep every instance from joining.
// nodeset puts it on the Node; the tenant's nodeset.dev/tenant still
// reaches the kubelet, as before.
func TestTheKubeletIsNeverGivenTheRestrictedTenantLabel(t *testing.T) {
	labels := map[string]string{
		nodesetv1alpha1.LabelTenant: "ml-research", nodesetv1alpha1.LabelTenantRestricted: "ml-research",
		"node-restriction.kubernetes.io/pci": "true", "tier": "web",
	}
	for _, format := range []nodesetv1alpha1.BootstrapFormat{"", nodesetv1alpha1.BootstrapScript} {
		s := &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Bootstrap: &nodesetv1alpha1.EKSBootstrap{
			Format: format, APIServerEndpoint: "https://prod.example.com", CertificateAuthority: "Q0E="}}
		encoded, err := UserData(s, labels, nil)
		require.NoError(t, err)
		userData, err := base64.StdEncoding.DecodeString(encoded)
		require.NoError(t, err)
		text := string(userData)
		assert.Contains(t, text, "--node-labels="+nodesetv1alpha1.LabelTenant+"=ml-research,tier=web", "format %q", format)
		assert.NotContains(t, text, "node-restriction.kubernetes.io", "format %q", format)
	}
}
