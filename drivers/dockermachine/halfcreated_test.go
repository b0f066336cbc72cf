package dockermachine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// TestAHalfCreatedMachineIsNeverForgotten: a cloud plugin's Create makes
// the machine (which it then knows by an id of its own, in its saved
// configuration) and fails after; the undo fails too (the cloud's API is
// down), and so does the node controller, which restarts. The next
// attempt must remove the machine that exists, not lose it: the
// configuration saved before Create does not know its id.
func TestAHalfCreatedMachineIsNeverForgotten(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	outage := filepath.Join(dir, "outage")
	require.NoError(t, os.WriteFile(outage, nil, 0o600))
	class := fakeClass(dir, map[string]string{"fake-cloud-ids": "true", "fake-fail-after-create": "true", "fake-outage": outage})
	_, err := d.Create(ctx, drivers.Machine{Name: "cloud-1", Class: class})
	require.ErrorContains(t, err, "did not come up")
	require.ErrorContains(t, err, "the API is down")
	require.Contains(t, store.records, "cloud-1", "a machine that could not be removed keeps its record")
	made := machineFiles(t, dir)
	require.Len(t, made, 1)

	// Its Node is deleted during the outage: the plugin cannot say
	// whether the machine exists, so its record stays.
	err = d.Delete(ctx, class, "cloud-1")
	require.ErrorContains(t, err, "the API is down")
	require.Contains(t, store.records, "cloud-1", "a machine the plugin could not look up keeps its record")

	// The outage ends; the node controller restarts and tries again.
	require.NoError(t, os.Remove(outage))
	delete(class.Spec.DockerMachine.Options, "fake-fail-after-create")
	restarted := New(Options{Store: store, Joiner: &fakeJoiner{}, StorePath: d.storePath})
	_, err = restarted.Create(ctx, drivers.Machine{Name: "cloud-1", Class: class})
	require.NoError(t, err)
	now := machineFiles(t, dir)
	assert.Len(t, now, 1, "one machine for the Node; the half-created one was removed, not leaked")
	assert.NotContains(t, now, made[0], "the half-created machine is gone")

	require.NoError(t, restarted.Delete(ctx, class, "cloud-1"))
	assert.Empty(t, machineFiles(t, dir))

	// Create succeeds and saving what it made fails: the machine is known
	// only to the plugin process that made it, which removes it at once.
	store.failPut = 2
	_, err = restarted.Create(ctx, drivers.Machine{Name: "cloud-2", Class: class})
	require.ErrorContains(t, err, "saving machine cloud-2")
	assert.Empty(t, machineFiles(t, dir), "the machine whose record could not be saved is removed, not leaked")
	_, err = restarted.Create(ctx, drivers.Machine{Name: "cloud-2", Class: class})
	require.NoError(t, err)
	assert.Len(t, machineFiles(t, dir), 1)
	assertNoPluginLeft(t)
}

// machineFiles are the fake plugin's machines in dir, as files.
func machineFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	return files
}

// TestSSHEndpointIsScrubbed: what a plugin reports of a machine (its SSH
// host) is plugin text like its errors: a credential value in it, here the
// host itself given as a credential option, is logged scrubbed.
func TestSSHEndpointIsScrubbed(t *testing.T) {
	sshd := startSSHD(t)
	ctx := context.Background()
	logs := klogBuffer(t)
	d, _, _ := newDriver(t)
	dir, out := t.TempDir(), t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-ssh-port": fmt.Sprint(sshd.Port), "fake-ssh-user": sshd.User, "fake-ssh-key": sshd.KeyFile})
	delete(class.Spec.DockerMachine.Options, "fake-ssh-host")
	class.Spec.DockerMachine.CredentialOptions["fake-ssh-host"] = "host"
	class.Credentials["host"] = []byte("localhost")
	class.Spec.DockerMachine.Provisioning = &nodesetv1alpha1.MachineProvisioning{
		Method: nodesetv1alpha1.ProvisioningSSH,
		Script: fmt.Sprintf("echo \"$NODE_NAME\" > %s/joined\n", out),
	}
	_, err := d.Create(ctx, drivers.Machine{Name: "ssh-1", Class: class})
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(out, "joined"), "the join script ran over SSH")
	assert.Contains(t, logs.String(), "Running the join script over SSH")
	assert.NotContains(t, logs.String(), "localhost", "the SSH host, a credential value, is not logged")
	assertNoPluginLeft(t)
}

// TestACloudThatCannotBeReachedIsNoGoneMachine: a plugin that cannot reach
// its cloud (its API's name does not resolve, a tool it runs is missing, a
// file it reads is gone, its cloud does not take its credentials) cannot
// say that a machine does not exist, however its error is worded; the
// machine's record stays, and the machine is removed once the cloud
// answers.
func TestACloudThatCannotBeReachedIsNoGoneMachine(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	outage := filepath.Join(dir, "outage")
	class := fakeClass(dir, map[string]string{"fake-cloud-ids": "true", "fake-outage": outage})
	failures := []string{
		`Post "https://api.fake.test/v1/machines": dial tcp: lookup api.fake.test on 10.96.0.10:53: no such host`,
		`exec: "fakectl": executable file not found in $PATH`,
		`open /var/lib/nodeset/docker-machine/machines/m/nodeset-credentials/fake-cacert: no such file or directory`,
		// rancher/machine's azure once its service principal is deleted,
		// and once its tenant cannot be looked up.
		`compute.VirtualMachinesClient#InstanceView: Failure preparing request: StatusCode=0 -- Original Error: azure.BearerAuthorizer#WithAuthorization: ` +
			`Failed to refresh the Token for request to https://management.azure.com/subscriptions/0000/resourceGroups/docker-machine/providers/Microsoft.Compute/virtualMachines/cloud-3/instanceView: ` +
			`StatusCode=400 -- Original Error: adal: Refresh request failed. Status Code = '400'. Response body: ` +
			`{"error":"unauthorized_client","error_description":"AADSTS700016: Application with identifier '0f0e' was not found in the directory 'contoso'."}`,
		`Failed to authenticate using client credentials: Header WWW-Authenticate not found in Get Subscription response`,
		// An AWS access key that was deleted.
		`InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our records.`,
	}
	for i, failure := range failures {
		name := fmt.Sprintf("cloud-%d", i)
		_, err := d.Create(ctx, drivers.Machine{Name: name, Class: class})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(outage, []byte(failure), 0o600))
		err = d.Delete(ctx, class, name)
		require.Error(t, err, failure)
		assert.Contains(t, store.records, name, "%s: the machine's record stays", failure)
		assert.Len(t, machineFiles(t, dir), 1, "%s: the machine is still there", failure)
		require.NoError(t, os.Remove(outage))
		require.NoError(t, d.Delete(ctx, class, name), "the cloud answers again")
		assert.NotContains(t, store.records, name)
		assert.Empty(t, machineFiles(t, dir))
	}
	assertNoPluginLeft(t)
}

// TestDeletingAHalfCreatedMachineRemovesWhatItMade: a plugin's Create makes
// other things before the machine itself (azure its network interface,
// public IP and security group, named after the machine; amazonec2 its key
// pair) and the attempt stops before the machine exists. Its Node is then
// deleted rather than tried again. The plugin says the machine does not
// exist, but its Remove still deletes what Create made; skipping it would
// leave those behind with no record to find them by.
func TestDeletingAHalfCreatedMachineRemovesWhatItMade(t *testing.T) {
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-nic": "true", "fake-hang-create": "true"})
	nic := filepath.Join(dir, "half.nic")
	attempt, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := d.Create(attempt, drivers.Machine{Name: "half", Class: class})
		done <- err
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "half.hanging"))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the plugin's Create started")
	stop()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return after its context was canceled")
	}
	require.Contains(t, store.records, "half")
	require.False(t, store.records["half"].Created)
	require.FileExists(t, nic, "Create made the network interface before it stopped")
	require.Empty(t, machineFiles(t, dir), "and no machine")

	require.NoError(t, d.Delete(context.Background(), class, "half"))
	assert.NotContains(t, store.records, "half")
	assert.NoFileExists(t, nic, "Delete removed what the unfinished Create made")
	assertNoPluginLeft(t)
}
