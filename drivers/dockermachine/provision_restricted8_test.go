package dockermachine

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestTheJoinScriptCarriesNoNodeLabels: a docker-machine machine's kubelet
// registers a Node nodeset made first, so it is given none of the Node's
// labels: in particular not the restricted tenant label of a Dedicated
// set or the seal, which a kubelet may not register with, whichever way
// the script reaches the machine.
func TestTheJoinScriptCarriesNoNodeLabels(t *testing.T) {
	d, _, _ := newDriver(t)
	for _, method := range []nodesetv1alpha1.ProvisioningMethod{nodesetv1alpha1.ProvisioningSSH, nodesetv1alpha1.ProvisioningUserData} {
		dm := &nodesetv1alpha1.DockerMachine{Provisioning: &nodesetv1alpha1.MachineProvisioning{Method: method, KubernetesVersion: "v1.37.2"}}
		machine := drivers.Machine{Name: "web-u1", Labels: map[string]string{
			nodesetv1alpha1.LabelTenantRestricted: "ml-research", nodesetv1alpha1.LabelTenant: "ml-research",
			nodesetv1alpha1.LabelSeal: "0123abcd"}}
		join, cleanup, err := d.prepareJoin(context.Background(), machine, dm)
		require.NoError(t, err)
		texts := []string{join.script}
		if join.userDataFile != "" {
			raw, err := os.ReadFile(join.userDataFile)
			require.NoError(t, err)
			texts = append(texts, string(raw))
		}
		cleanup()
		for _, text := range texts {
			assert.Contains(t, text, "NODE_NAME='web-u1'", "method %q", method)
			assert.NotContains(t, text, "node-restriction.kubernetes.io", "method %q", method)
			assert.NotContains(t, text, "--node-labels", "method %q", method)
			assert.NotContains(t, text, "0123abcd", "method %q", method)
		}
	}
}
