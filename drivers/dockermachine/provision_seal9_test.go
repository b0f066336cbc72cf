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

// TestTheJoinScriptCarriesNoSeal: the machine's kubelet registers a Node
// nodeset made first, sealed; the seal is not in the join script.
func TestTheJoinScriptCarriesNoSeal(t *testing.T) {
	d, _, _ := newDriver(t)
	for _, method := range []nodesetv1alpha1.ProvisioningMethod{nodesetv1alpha1.ProvisioningSSH, nodesetv1alpha1.ProvisioningUserData} {
		dm := &nodesetv1alpha1.DockerMachine{Provisioning: &nodesetv1alpha1.MachineProvisioning{Method: method, KubernetesVersion: "v1.37.2"}}
		machine := drivers.Machine{Name: "web-u1", Labels: map[string]string{nodesetv1alpha1.LabelSeal: "0123abcd"}}
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
			assert.NotContains(t, text, "0123abcd", "method %q", method)
			assert.NotContains(t, text, nodesetv1alpha1.LabelSeal, "method %q", method)
		}
	}
}
