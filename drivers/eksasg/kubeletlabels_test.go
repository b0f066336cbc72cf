package eksasg

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
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

// TestUserDataOverEC2sLimitIsRefusedByName: EC2 refuses user data above
// 16 KiB (before base64) with the whole encoded text in its message. A
// class's bootstrap and a NodeSet's labels and kubelet arguments (each
// allowed on its own) can add up to more: the driver says so, naming the
// fields, before any call, as an invalid configuration (not retried).
func TestUserDataOverEC2sLimitIsRefusedByName(t *testing.T) {
	for _, format := range []nodesetv1alpha1.BootstrapFormat{"", nodesetv1alpha1.BootstrapScript} {
		s := &nodesetv1alpha1.EKSAutoscalingGroup{ClusterName: "prod", Bootstrap: &nodesetv1alpha1.EKSBootstrap{
			Format: format, APIServerEndpoint: "https://prod.example.com", CertificateAuthority: strings.Repeat("Q", 12<<10)}}
		_, err := UserData(s, map[string]string{"tier": "web"}, nil)
		require.NoError(t, err, "format %q: 12 KiB of CA fits", format)

		labels := map[string]string{}
		for i := range 64 {
			labels[fmt.Sprintf("team.example.com/label-%02d", i)] = strings.Repeat("v", 63)
		}
		_, err = UserData(s, labels, nil)
		require.ErrorIs(t, err, drivers.ErrInvalidConfiguration, "format %q", format)
		assert.Contains(t, err.Error(), "spec.eksAutoscalingGroup.bootstrap", "format %q", format)
		assert.Contains(t, err.Error(), "at most 16384", "format %q", format)
	}
}
