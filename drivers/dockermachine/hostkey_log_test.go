package dockermachine

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rancher/machine/libmachine/mcnflag"
	"github.com/rancher/machine/libmachine/state"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"nodeset.dev/nodeset/drivers"
)

// sshOnlyPlugin is a plugin whose machine is at host:port, reached with
// the key at keyPath.
type sshOnlyPlugin struct {
	host    string
	port    int
	keyPath string
}

func (p sshOnlyPlugin) CreateFlags() ([]mcnflag.Flag, error)    { return nil, nil }
func (p sshOnlyPlugin) SetConfigFromFlags(map[string]any) error { return nil }
func (p sshOnlyPlugin) PreCreateCheck() error                   { return nil }
func (p sshOnlyPlugin) GetConfigRaw() ([]byte, error)           { return []byte("{}"), nil }
func (p sshOnlyPlugin) Create() error                           { return nil }
func (p sshOnlyPlugin) GetState() (state.State, error)          { return state.Running, nil }
func (p sshOnlyPlugin) Remove() error                           { return nil }
func (p sshOnlyPlugin) GetSSHHostname() (string, error)         { return p.host, nil }
func (p sshOnlyPlugin) GetSSHPort() (int, error)                { return p.port, nil }
func (p sshOnlyPlugin) GetSSHUsername() string                  { return "root" }
func (p sshOnlyPlugin) GetSSHKeyPath() string                   { return p.keyPath }

// startHandshakeOnlySSHD serves SSH handshakes on addr with a fresh host
// key, accepting any client key; it runs nothing.
func startHandshakeOnlySSHD(t *testing.T, addr string) (ssh.PublicKey, int) {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	require.NoError(t, err)
	config := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) { return nil, nil }}
	config.AddHostKey(hostSigner)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if _, chans, reqs, err := ssh.NewServerConn(conn, config); err == nil {
					go ssh.DiscardRequests(reqs)
					for ch := range chans {
						_ = ch.Reject(ssh.Prohibited, "no")
					}
				}
			}()
		}
	}()
	return hostSigner.PublicKey(), l.Addr().(*net.TCPAddr).Port
}

// TestRefusedHostAddressIsScrubbedInTheLog: the SSH address of a machine
// is its plugin's text, and may be a credential (an admin who keeps the
// pool's host addresses in the class's Secret, passed by credentialOptions
// as generic-ip-address). The log line that says a machine was refused
// another namespace's host must not show it, as the line that says the
// join script runs does not.
func TestRefusedHostAddressIsScrubbedInTheLog(t *testing.T) {
	const host = "127.3.14.15" // the credential
	buf := klogBuffer(t)
	hostKey, port := startHandshakeOnlySSHD(t, net.JoinHostPort(host, "0"))
	_, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	require.NoError(t, err)
	keyPath := filepath.Join(t.TempDir(), "id_ed25519")
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(block), 0o600))

	d, store, _ := newDriver(t)
	remember(map[string][]byte{"pool-host": []byte(host)}) // as Create does with the class's credentials
	store.records["b-1"] = Record{Name: "b-1", Owner: drivers.Owner{Namespace: "team-b", Name: "metal"},
		HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey)))}
	record := Record{Name: "a-1", Owner: drivers.Owner{Namespace: "team-a", Name: "metal"}}
	err = d.provisionSSH(context.Background(), sshOnlyPlugin{host: host, port: port, keyPath: keyPath}, &record, joinSettings{script: "true"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not of this NodeSet's namespace")
	logged := buf.String()
	require.Contains(t, logged, "Refused a machine the host of another namespace's machine")
	assert.NotContains(t, logged, host, "the address, a credential, is in the log: %s", logged)
}
