package dockermachine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rancher/machine/libmachine/mcnflag"
	"github.com/rancher/machine/libmachine/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// userDataQuoter is a plugin whose cloud refuses the machine, quoting the
// user data it was sent: as is and base64-encoded, as clouds take it.
type userDataQuoter struct{ values map[string]any }

func (p *userDataQuoter) CreateFlags() ([]mcnflag.Flag, error) {
	return []mcnflag.Flag{mcnflag.StringFlag{Name: "user-data", Usage: "user data file"}}, nil
}
func (p *userDataQuoter) SetConfigFromFlags(values map[string]any) error {
	p.values = values
	return nil
}
func (p *userDataQuoter) PreCreateCheck() error         { return nil }
func (p *userDataQuoter) GetConfigRaw() ([]byte, error) { return json.Marshal(p.values) }
func (p *userDataQuoter) Create() error {
	path, _ := p.values["user-data"].(string)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return fmt.Errorf("InvalidParameterValue: user data %q (UserData=%s) refused", data, base64.StdEncoding.EncodeToString(data))
}
func (p *userDataQuoter) GetState() (state.State, error) {
	return state.None, fmt.Errorf("machine does not exist")
}
func (p *userDataQuoter) Remove() error                   { return nil }
func (p *userDataQuoter) GetSSHHostname() (string, error) { return "", nil }
func (p *userDataQuoter) GetSSHPort() (int, error)        { return 22, nil }
func (p *userDataQuoter) GetSSHUsername() string          { return "" }
func (p *userDataQuoter) GetSSHKeyPath() string           { return "" }

type userDataQuoterOpener struct{}

func (userDataQuoterOpener) Open(context.Context, string, []byte) (Plugin, func(), error) {
	return &userDataQuoter{}, func() {}, nil
}

// TestBootstrapTokenInUserDataIsScrubbed: the user data of a machine that
// joins by UserData holds its bootstrap token, a credential that lets a
// kubelet join the cluster. A plugin, or its cloud, that quotes the user
// data in an error must not carry the token into the error the node
// controller stores and shows (the provisioning-error annotation, Events,
// cluster-autoscaler's instance status) and logs.
func TestBootstrapTokenInUserDataIsScrubbed(t *testing.T) {
	joiner := &fakeJoiner{}
	d := New(Options{Store: newMemStore(), Joiner: joiner, StorePath: t.TempDir(), Opener: userDataQuoterOpener{}})
	class := drivers.Class{Name: "dm", Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverDockerMachine,
		DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName: fakeplugin.Name, // found in PATH; served by the opener above
			Provisioning: &nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData, UserDataOption: "user-data",
				KubernetesVersion: "v1.37.2"},
		}},
	}}
	_, err := d.Create(context.Background(), drivers.Machine{Name: "web-ud1", Class: class})
	require.Error(t, err)
	require.Contains(t, err.Error(), "InvalidParameterValue", "the cloud's answer is kept")
	token := joiner.tokens["web-ud1"]
	require.NotEmpty(t, token)
	_, secret, _ := strings.Cut(token, ".")
	assert.NotContains(t, err.Error(), secret, "the bootstrap token's secret, as is")
	for _, encoded := range base64Inside(secret) {
		assert.NotContains(t, err.Error(), encoded, "the bootstrap token's secret, base64-encoded in the user data")
	}
}

// base64Inside are the characters of the base64 encoding of a text that
// only the bytes of secret determine, for each of its 3 offsets.
func base64Inside(secret string) []string {
	var out []string
	for offset := range 3 {
		encoded := base64.StdEncoding.EncodeToString(append(make([]byte, offset), secret...))
		out = append(out, encoded[(offset*8+5)/6:(offset+len(secret))*8/6])
	}
	return out
}
