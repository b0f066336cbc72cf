package eksasg

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestTheKubeletIsNeverGivenTheSeal: the seal is on every Node of a set;
// in the bootstrap's --node-labels the kubelet would refuse to start.
func TestTheKubeletIsNeverGivenTheSeal(t *testing.T) {
	for _, format := range []nodesetv1alpha1.BootstrapFormat{"", nodesetv1alpha1.BootstrapScript} {
		s := &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Bootstrap: &nodesetv1alpha1.EKSBootstrap{
			Format: format, APIServerEndpoint: "https://prod.example.com", CertificateAuthority: "Q0E="}}
		encoded, err := UserData(s, map[string]string{nodesetv1alpha1.LabelSeal: "0123abcd", "tier": "web"}, nil)
		require.NoError(t, err)
		userData, err := base64.StdEncoding.DecodeString(encoded)
		require.NoError(t, err)
		assert.Contains(t, string(userData), "--node-labels=tier=web", "format %q", format)
		assert.NotContains(t, string(userData), nodesetv1alpha1.LabelSeal, "format %q", format)
	}
}
