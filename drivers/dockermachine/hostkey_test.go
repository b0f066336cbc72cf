package dockermachine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/test/framework"
)

// addressProxy is one SSH address whose host changes: it forwards each
// connection to the port it is set to, as an address a cloud gives to
// another machine.
type addressProxy struct {
	listener net.Listener
	target   atomic.Int32
	wg       sync.WaitGroup
}

func startAddressProxy(t *testing.T, target int) *addressProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &addressProxy{listener: l}
	p.target.Store(int32(target))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer conn.Close()
				upstream, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.target.Load()))
				if err != nil {
					return
				}
				defer upstream.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(upstream, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *addressProxy) port() int { return p.listener.Addr().(*net.TCPAddr).Port }

// TestAResumedJoinGoesOnlyToTheMachineFirstReached: a machine's join did
// not finish (the script failed, or the node controller stopped), and
// before the next attempt its address came to another host, which accepts
// the machine's SSH key. The next attempt must not send it the join
// script (and a fresh bootstrap token): the host key the machine showed
// the first time is required on every later connection. Once the machine
// answers at its address again, the join goes on there.
func TestAResumedJoinGoesOnlyToTheMachineFirstReached(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sshd")
	}
	ctx := context.Background()
	machine, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	defer machine.Stop()
	otherDir := t.TempDir()
	other, err := framework.StartSSHD(otherDir)
	require.NoError(t, err)
	defer other.Stop()
	// The other host lets the machine's key in: a host key is all that
	// tells them apart.
	authorized, err := os.ReadFile(filepath.Join(filepath.Dir(machine.KeyFile), "authorized_keys"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(otherDir, "authorized_keys"), authorized, 0o600))
	address := startAddressProxy(t, machine.Port)

	d, store, _ := newDriver(t)
	dir, out := t.TempDir(), t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-ssh-port": fmt.Sprint(address.port()), "fake-ssh-user": machine.User, "fake-ssh-key": machine.KeyFile})
	joined := func(name string) string {
		data, err := os.ReadFile(filepath.Join(out, "joined-"+name))
		if errors.Is(err, os.ErrNotExist) {
			return ""
		}
		require.NoError(t, err)
		return strings.TrimSpace(string(data))
	}
	// Each run records the port of the sshd it reached.
	script := fmt.Sprintf("set -- $SSH_CONNECTION; echo \"$4 $BOOTSTRAP_TOKEN\" > %s/joined-$NODE_NAME\n", out)
	class.Spec.DockerMachine.Provisioning = &nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningSSH, Script: "exit 3"}
	_, err = d.Create(ctx, drivers.Machine{Name: "ssh-1", Class: class})
	require.ErrorContains(t, err, "the join script failed over SSH", "the first join reached the machine, and failed")
	require.True(t, store.records["ssh-1"].Created)
	require.False(t, store.records["ssh-1"].Provisioned)

	address.target.Store(int32(other.Port))
	class.Spec.DockerMachine.Provisioning.Script = script
	_, err = d.Create(ctx, drivers.Machine{Name: "ssh-1", Class: class})
	require.Error(t, err, "the host now at the machine's address is not the machine")
	assert.Contains(t, err.Error(), "not sending the join script to 127.0.0.1:")
	assert.Contains(t, err.Error(), "its host key differs from the machine's: it shows SHA256:")
	assert.Empty(t, joined("ssh-1"), "it was sent no join script, nor bootstrap token")
	assert.False(t, store.records["ssh-1"].Provisioned)

	address.target.Store(int32(machine.Port))
	_, err = d.Create(ctx, drivers.Machine{Name: "ssh-1", Class: class})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d abcdef.0123456789abcdef", machine.Port), joined("ssh-1"), "the join went to the machine")
	assert.True(t, store.records["ssh-1"].Provisioned)

	// A node controller that stops after the machine answered, the join
	// script sent or not, has recorded its host key: the attempt after its
	// restart is held to it as well.
	store.crashPut = 4
	crashed(t, func() { _, _ = d.Create(ctx, drivers.Machine{Name: "ssh-2", Class: class}) })
	require.True(t, store.records["ssh-2"].Created)
	require.False(t, store.records["ssh-2"].Provisioned)
	address.target.Store(int32(other.Port))
	restarted := New(Options{Store: store, Joiner: &fakeJoiner{}, StorePath: d.storePath})
	_, err = restarted.Create(ctx, drivers.Machine{Name: "ssh-2", Class: class})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "host key")
	assert.NotContains(t, joined("ssh-2"), fmt.Sprint(other.Port), "the other host got no join script")
	address.target.Store(int32(machine.Port))
	_, err = restarted.Create(ctx, drivers.Machine{Name: "ssh-2", Class: class})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d abcdef.0123456789abcdef", machine.Port), joined("ssh-2"))
	assertNoPluginLeft(t)
}
