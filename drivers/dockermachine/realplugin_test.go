package dockermachine

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/redact"
	"nodeset.dev/nodeset/test/framework"
)

// genericClass is the shipped example's class (deploy/examples), aimed at
// sshd: rancher/machine's generic driver adopting the loopback host, with
// the SSH key given as a file credential.
func genericClass(sshd *framework.SSHD, out string) drivers.Class {
	key, err := os.ReadFile(sshd.KeyFile)
	if err != nil {
		panic(err)
	}
	return drivers.Class{Name: "bare-metal", Spec: nodesetv1alpha1.NodeClassSpec{
		Driver:               nodesetv1alpha1.DriverDockerMachine,
		CredentialsSecretRef: &nodesetv1alpha1.SecretReference{Namespace: "nodeset-system", Name: "bare-metal-ssh"},
		DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName: "generic",
			Options: map[string]string{
				"generic-ip-address": "127.0.0.1",
				"generic-ssh-port":   strconv.Itoa(sshd.Port),
				"generic-ssh-user":   sshd.User,
			},
			CredentialFileOptions: map[string]string{"generic-ssh-key": "ssh-private-key"},
			Provisioning: &nodesetv1alpha1.MachineProvisioning{
				Method: nodesetv1alpha1.ProvisioningSSH,
				Script: fmt.Sprintf("echo \"$NODE_NAME\" >> %s/joined\n", out),
			},
		}},
	}, Credentials: map[string][]byte{"ssh-private-key": key}}
}

// startSSHD starts a loopback sshd for the test, stopped with it; under
// -short the test is skipped.
func startSSHD(t *testing.T) *framework.SSHD {
	t.Helper()
	if testing.Short() {
		t.Skip("starts sshd")
	}
	sshd, err := framework.StartSSHD(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(sshd.Stop)
	return sshd
}

// TestGenericDriver runs rancher/machine's own generic driver (this test
// binary, as docker-machine-driver-generic) against a loopback sshd: the
// machine's store directory is made before its Create, the key given as a
// file credential is copied there by generic, the join script runs with
// it, a failed or interrupted Create is undone so the next one succeeds,
// and Delete leaves no file behind.
func TestGenericDriver(t *testing.T) {
	sshd := startSSHD(t)
	ctx := context.Background()
	d, store, _ := newDriver(t)
	out := t.TempDir()
	class := genericClass(sshd, out)
	require.NoError(t, d.Validate(ctx, class))
	require.NoError(t, d.ValidateCloud(ctx, class))

	id, err := d.Create(ctx, drivers.Machine{Name: "gen-1", Class: class})
	require.NoError(t, err)
	assert.Equal(t, "docker-machine://generic/gen-1", id)
	joined, err := os.ReadFile(filepath.Join(out, "joined"))
	require.NoError(t, err, "the join script ran over SSH")
	assert.Equal(t, "gen-1\n", string(joined))
	dir := d.machineDir("gen-1")
	for _, file := range []string{filepath.Join(dir, "generic-ssh-key"), filepath.Join(dir, credentialsDirName, "generic-ssh-key")} {
		info, err := os.Stat(file)
		require.NoError(t, err, "%s: generic's copy of the key, and the file credential it was copied from", file)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), file)
	}
	assert.NotContains(t, string(store.records["gen-1"].Config), "PRIVATE KEY", "the record holds the key's path, not the key")
	again, err := d.Create(ctx, drivers.Machine{Name: "gen-1", Class: class})
	require.NoError(t, err)
	assert.Equal(t, id, again)
	status, err := d.Get(ctx, class, "gen-1")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)

	// A Create that generic fails (its key copy lands on a directory) is
	// undone; the next one succeeds.
	require.NoError(t, os.MkdirAll(filepath.Join(d.machineDir("gen-2"), "generic-ssh-key", "x"), 0o700))
	_, err = d.Create(ctx, drivers.Machine{Name: "gen-2", Class: class})
	require.ErrorContains(t, err, "unable to copy ssh key")
	assert.NotContains(t, store.records, "gen-2")
	_, err = d.Create(ctx, drivers.Machine{Name: "gen-2", Class: class})
	require.NoError(t, err, "the attempt after a failed Create succeeds")

	// A node controller that stops between generic's Create and saving
	// what it made: the next Create undoes and redoes it, and joins.
	store.crashPut = 2
	crashed(t, func() { _, _ = d.Create(ctx, drivers.Machine{Name: "gen-3", Class: class}) })
	require.False(t, store.records["gen-3"].Created)
	_, err = d.Create(ctx, drivers.Machine{Name: "gen-3", Class: class})
	require.NoError(t, err, "the retry after a crash in Create")
	joined, _ = os.ReadFile(filepath.Join(out, "joined"))
	assert.Equal(t, "gen-1\ngen-2\ngen-3\n", string(joined))

	for _, name := range []string{"gen-1", "gen-2", "gen-3"} {
		require.NoError(t, d.Delete(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}, name))
		assert.NoDirExists(t, d.machineDir(name), "the key files go with the machine")
	}
	assert.Empty(t, store.records)
}

// TestCredentialOptionsThatTakeFiles: the shipped example of the first
// release (the key's contents in an option that takes a path) is refused
// with the way to fix it, before the plugin sees it, and never quotes the
// key; credentialFileOptions are checked against the plugin's flags.
func TestCredentialOptionsThatTakeFiles(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	key := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAC3NzaC1lZDI1NTE5AAAAIPlantedKeyLineOne\nAAAAIPlantedKeyLineTwoXXXXXXXXXXXXXXXXXX\n-----END OPENSSH PRIVATE KEY-----\n")
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	class.Credentials["ssh-private-key"] = key
	class.Spec.DockerMachine.CredentialOptions["fake-ssh-key"] = "ssh-private-key"
	require.NoError(t, d.Validate(ctx, drivers.Class{Name: class.Name, Spec: class.Spec}), "without the Secret, only names are checked")
	for _, err := range []error{d.ValidateCloud(ctx, class), func() error { _, err := d.Create(ctx, drivers.Machine{Name: "k1", Class: class}); return err }()} {
		require.Error(t, err)
		assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
		assert.Contains(t, err.Error(), `option "fake-ssh-key" takes a file path`)
		assert.Contains(t, err.Error(), "credentialFileOptions")
		assert.NotContains(t, err.Error(), "PlantedKey")
	}

	tests := []struct {
		name   string
		mutate func(*nodesetv1alpha1.DockerMachine)
		want   string
	}{
		{"not a text option", func(dm *nodesetv1alpha1.DockerMachine) {
			dm.CredentialFileOptions = map[string]string{"fake-cpus": "ssh-private-key"}
		},
			`spec.dockerMachine.credentialFileOptions[fake-cpus]: option "fake-cpus" does not take a file path`},
		{"unknown option", func(dm *nodesetv1alpha1.DockerMachine) {
			dm.CredentialFileOptions = map[string]string{"fake-key": "ssh-private-key"}
		},
			`spec.dockerMachine.credentialFileOptions[fake-key]: "fake-key" is not an option of plugin docker-machine-driver-fake`},
		{"set twice", func(dm *nodesetv1alpha1.DockerMachine) {
			dm.CredentialFileOptions = map[string]string{"fake-ssh-key": "ssh-private-key"}
			dm.Options["fake-ssh-key"] = "/tmp/key"
		}, `spec.dockerMachine.credentialFileOptions[fake-ssh-key]: option "fake-ssh-key" is also set by spec.dockerMachine.options[fake-ssh-key]`},
		{"missing key", func(dm *nodesetv1alpha1.DockerMachine) {
			dm.CredentialFileOptions = map[string]string{"fake-ssh-key": "nope"}
		},
			`spec.dockerMachine.credentialFileOptions[fake-ssh-key]: the credentials Secret has no key "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := fakeClass(dir, nil)
			class.Credentials["ssh-private-key"] = key
			tt.mutate(class.Spec.DockerMachine)
			err := d.ValidateCloud(ctx, class)
			require.Error(t, err)
			assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	// Given as a file, the key reaches the plugin as a path, in a private
	// file that goes with the machine.
	class = fakeClass(dir, nil)
	class.Credentials["ssh-private-key"] = key
	class.Spec.DockerMachine.CredentialFileOptions = map[string]string{"fake-ssh-key": "ssh-private-key"}
	require.NoError(t, d.ValidateCloud(ctx, class))
	_, err := d.Create(ctx, drivers.Machine{Name: "k2", Class: class})
	require.NoError(t, err)
	file := d.credentialFilePath("k2", "fake-ssh-key")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, key, data)
	info, _ := os.Stat(file)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	kept, err := os.ReadFile(filepath.Join(d.machineDir("k2"), "id_ed25519"))
	require.NoError(t, err, "the plugin keeps its copy in the machine's store directory")
	assert.Equal(t, key, kept)
	require.NoError(t, d.Delete(ctx, drivers.Class{}, "k2"))
	assert.NoDirExists(t, d.machineDir("k2"))
	assertNoPluginLeft(t)
}

// klogBuffer captures klog's output at -v=6 for the test.
func klogBuffer(t *testing.T) *syncBuffer {
	t.Helper()
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	require.NoError(t, fs.Set("v", "6"))
	require.NoError(t, fs.Set("logtostderr", "false"))
	require.NoError(t, fs.Set("alsologtostderr", "false"))
	buf := &syncBuffer{}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestPluginTextIsScrubbed: a plugin that quotes every value it was given
// in its output and its errors (fake-echo) gets no credential into an error
// or a log line, whether it is quoted, raw, or a line of a key.
func TestPluginTextIsScrubbed(t *testing.T) {
	ctx := context.Background()
	logs := klogBuffer(t)
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	const token = "planted-token-Zq81xR"
	keyLines := []string{"PlantedKeyLineOneQwErTy0123456789abcdef", "PlantedKeyLineTwoAsDfGh0123456789abcdef"}
	key := "-----BEGIN OPENSSH PRIVATE KEY-----\n" + strings.Join(keyLines, "\n") + "\n-----END OPENSSH PRIVATE KEY-----\n"
	class := fakeClass(dir, map[string]string{"fake-echo": "true", "fake-fail-create": "true"})
	class.Credentials = map[string][]byte{"token": []byte(token), "ssh-private-key": []byte(key)}
	class.Spec.DockerMachine.CredentialFileOptions = map[string]string{"fake-ssh-key": "ssh-private-key"}
	_, err := d.Create(ctx, drivers.Machine{Name: "echo-1", Class: class})
	require.ErrorContains(t, err, "fake: out of machines")
	assert.Contains(t, err.Error(), "[redacted:token]")
	assert.Contains(t, err.Error(), "[redacted:ssh-private-key]")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "fake: creating with") }, 5*time.Second, 20*time.Millisecond,
		"the plugin's output reaches the log at -v=5")
	for name, text := range map[string]string{"error": err.Error(), "log": logs.String()} {
		for _, planted := range append([]string{token, key, strconv.Quote(key)}, keyLines...) {
			assert.NotContains(t, text, planted, name)
		}
	}
	assertNoPluginLeft(t)
}

// TestOldCredentialsStayScrubbedAfterARestart: a machine's plugin keeps
// the credential values it was made with in its saved configuration, and
// may quote them long after the class's Secret has changed. A node
// controller started after the change never saw the old values in a
// Secret; it learns them from the machine's record, and scrubs them.
func TestOldCredentialsStayScrubbedAfterARestart(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	const old = "old-token-Hk29vLq7"
	class := fakeClass(dir, map[string]string{"fake-echo": "true", "fake-fail-remove": "true"})
	class.Credentials = map[string][]byte{"token": []byte(old)}
	_, err := d.Create(ctx, drivers.Machine{Name: "rotated-1", Class: class})
	require.NoError(t, err)

	// The Secret is rotated, and the node controller restarts: it knows
	// no credential value but the new one.
	credentialValues = redact.Set{}
	class.Credentials = map[string][]byte{"token": []byte("new-token-Pw31xZa5")}
	restarted := New(Options{Store: store, Joiner: &fakeJoiner{}, StorePath: d.storePath})
	err = restarted.Delete(ctx, class, "rotated-1")
	require.ErrorContains(t, err, "fake: cannot remove machine rotated-1 with token=")
	assert.NotContains(t, err.Error(), old)
	assert.Contains(t, err.Error(), "[redacted:token]")
	assertNoPluginLeft(t)
}

// TestAHostIsNeverTakenFromAnotherTenant: a class whose NodeSets may set
// generic-ip-address, with one SSH key for every host of the pool. A
// tenant that points its machine at a host another namespace's machine
// runs on gets no join script run there (which would make that host's
// kubelet join as the tenant's Node), nor does a static Node's; once the
// other machine is gone, the host may be taken. Machines of one namespace
// may share a host.
func TestAHostIsNeverTakenFromAnotherTenant(t *testing.T) {
	sshd := startSSHD(t)
	ctx := context.Background()
	d, store, _ := newDriver(t)
	out := t.TempDir()
	class := genericClass(sshd, out)
	teamA := drivers.Owner{Cluster: "test", Namespace: "team-a", Name: "metal", UID: "set-a"}
	teamB := drivers.Owner{Cluster: "test", Namespace: "team-b", Name: "metal", UID: "set-b"}
	joined := func() string {
		data, _ := os.ReadFile(filepath.Join(out, "joined"))
		return string(data)
	}

	_, err := d.Create(ctx, drivers.Machine{Name: "a-1", Class: class, Owner: teamA})
	require.NoError(t, err)
	_, err = d.Create(ctx, drivers.Machine{Name: "a-2", Class: class, Owner: teamA})
	require.NoError(t, err, "one tenant's machines may share a host")
	for _, m := range []drivers.Machine{{Name: "b-1", Class: class, Owner: teamB}, {Name: "static-1", Class: class}} {
		_, err = d.Create(ctx, m)
		require.Error(t, err, m.Name)
		assert.Regexp(t, `machine `+m.Name+`: not sending the join script to .*: the host there shows the SSH host key of a machine that is not of this NodeSet's namespace`, err.Error())
		assert.NotRegexp(t, `a-[12]`, err.Error(), "the other tenant's machine is not named to this one")
	}
	assert.Equal(t, "a-1\na-2\n", joined(), "no join script ran for another tenant's machine")
	assert.Empty(t, store.records["b-1"].HostKey, "nor was the host recorded as b-1's")

	for _, name := range []string{"a-1", "a-2"} {
		require.NoError(t, d.Delete(ctx, class, name))
	}
	_, err = d.Create(ctx, drivers.Machine{Name: "b-1", Class: class, Owner: teamB})
	require.NoError(t, err, "a host no machine runs on may be taken")
	assert.Equal(t, "a-1\na-2\nb-1\n", joined())
	require.NoError(t, d.Delete(ctx, class, "b-1"))
	require.NoError(t, d.Delete(ctx, class, "static-1"))
	assertNoPluginLeft(t)
}
