package dockermachine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/test/framework"
)

// createReturns runs Create in the background and waits, bounded, for it
// to return.
func createReturns(t *testing.T, d *Driver, machine drivers.Machine) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := d.Create(context.Background(), machine)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("Create of %s did not return, a minute after its class's registration timeout", machine.Name)
		return nil
	}
}

// TestNoAttemptOutlivesTheRegistrationTimeout: a machine that has not
// joined within its class's registrationTimeout is to be replaced, and the
// node controller can replace it only once the attempt to make it has
// returned. A plugin whose Create never returns (a cloud call that hangs)
// and a join script that never ends are stopped at the timeout; the next
// attempt undoes what the stopped one left and makes the machine.
func TestNoAttemptOutlivesTheRegistrationTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts sshd")
	}
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	goroutines := runtime.NumGoroutine()
	hanging := fakeClass(dir, map[string]string{"fake-hang-create": "true"})
	hanging.Spec.RegistrationTimeout = &metav1.Duration{Duration: 2 * time.Second}
	err := createReturns(t, d, drivers.Machine{Name: "hung", Class: hanging})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assertNoPluginLeft(t)
	assert.False(t, store.records["hung"].Created)
	require.NoError(t, createReturns(t, d, drivers.Machine{Name: "hung", Class: fakeClass(dir, nil)}), "the next attempt makes the machine")
	require.NoError(t, d.Delete(context.Background(), hanging, "hung"))

	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	defer sshd.Stop()
	out := t.TempDir()
	release := filepath.Join(out, "release")
	defer os.WriteFile(release, nil, 0o600) //nolint:errcheck // ends the script left on the host
	stuck := fakeClass(dir, map[string]string{"fake-ssh-port": fmt.Sprint(sshd.Port), "fake-ssh-user": sshd.User, "fake-ssh-key": sshd.KeyFile})
	// Long enough for the machine to be made and its join script started
	// on a loaded machine; the script then holds the attempt until the
	// deadline.
	stuck.Spec.RegistrationTimeout = &metav1.Duration{Duration: 15 * time.Second}
	stuck.Spec.DockerMachine.Provisioning = &nodesetv1alpha1.MachineProvisioning{
		Method: nodesetv1alpha1.ProvisioningSSH,
		Script: fmt.Sprintf("touch %[1]s/started-$NODE_NAME\nwhile [ ! -e %[2]s ]; do sleep 0.2; done\n", out, release),
	}
	err = createReturns(t, d, drivers.Machine{Name: "stuck", Class: stuck})
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.FileExists(t, filepath.Join(out, "started-stuck"), "the join script ran")
	assert.False(t, store.records["stuck"].Provisioned, "the machine is made, its join did not finish")
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	// The next attempt's time is not what is tested.
	stuck.Spec.RegistrationTimeout = &metav1.Duration{Duration: time.Minute}
	require.NoError(t, createReturns(t, d, drivers.Machine{Name: "stuck", Class: stuck}), "the next attempt joins the machine")
	assert.True(t, store.records["stuck"].Provisioned)
	require.NoError(t, d.Delete(context.Background(), stuck, "stuck"))
	assertNothingLeaks(t, goroutines)
}
