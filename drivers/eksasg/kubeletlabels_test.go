package eksasg

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTheKubeletIsGivenOnlyLabelsItAccepts: the kubelet refuses to start
// when --node-labels has a key of the kubernetes.io or k8s.io domains
// outside the few it may set itself (node-role.kubernetes.io/worker, a
// class's nodeTemplate label many admins set, is not one of them). The
// instance would never join; nodeset puts such labels on the Node itself.
func TestTheKubeletIsGivenOnlyLabelsItAccepts(t *testing.T) {
	labels := map[string]string{
		"node-role.kubernetes.io/worker": "", "example.k8s.io/x": "y", "kubernetes.io/role": "worker",
		"tier": "web", "node.kubernetes.io/lifecycle": "spot", "kubelet.kubernetes.io/x": "y", "topology.kubernetes.io/zone": "us-east-1a",
		nodesetv1alpha1.LabelNodeSet: "web",
	}
	for _, format := range []nodesetv1alpha1.BootstrapFormat{"", nodesetv1alpha1.BootstrapScript} {
		s := &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Bootstrap: &nodesetv1alpha1.EKSBootstrap{
			Format: format, APIServerEndpoint: "https://prod.example.com", CertificateAuthority: "Q0E="}}
		encoded, err := UserData(s, labels, nil)
		require.NoError(t, err)
		userData, err := base64.StdEncoding.DecodeString(encoded)
		require.NoError(t, err)
		text := string(userData)
		assert.Contains(t, text, "--node-labels=kubelet.kubernetes.io/x=y,node.kubernetes.io/lifecycle=spot,"+nodesetv1alpha1.LabelNodeSet+"=web,tier=web,topology.kubernetes.io/zone=us-east-1a",
			"format %q", format)
		assert.NotContains(t, text, "node-role.kubernetes.io", "format %q", format)
		assert.NotContains(t, text, "example.k8s.io", "format %q", format)
		assert.NotContains(t, text, "kubernetes.io/role", "format %q", format)
	}
}
