package dockermachine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rancher/machine/drivers/amazonec2"
	"github.com/rancher/machine/drivers/generic"
	"github.com/rancher/machine/drivers/softlayer"
	"github.com/rancher/machine/libmachine/drivers/plugin"
	"github.com/rancher/machine/libmachine/drivers/plugin/localbinary"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// pluginPath is the docker-machine-driver-fake link to this test binary.
var pluginPath string

// TestMain doubles as the plugins: libmachine starts
// docker-machine-driver-fake, docker-machine-driver-generic,
// docker-machine-driver-softlayer or docker-machine-driver-amazonec2 (links
// to this binary) with the plugin token in its environment, and then this
// binary serves the plugin RPC, as the fake plugin or as rancher/machine's
// own generic, softlayer or amazonec2 driver.
func TestMain(m *testing.M) {
	if os.Getenv(localbinary.PluginEnvKey) == localbinary.PluginEnvVal {
		if filepath.Base(os.Args[0]) == BinaryName("generic") {
			plugin.RegisterDriver(generic.NewDriver("", ""))
			return
		}
		if filepath.Base(os.Args[0]) == BinaryName("softlayer") {
			plugin.RegisterDriver(softlayer.NewDriver("", ""))
			return
		}
		if filepath.Base(os.Args[0]) == BinaryName("amazonec2") {
			plugin.RegisterDriver(amazonec2.NewDriver("", ""))
			return
		}
		if filepath.Base(os.Args[0]) == BinaryName(oldServicePlugin) {
			fakeplugin.ServeOldServiceName(fakeplugin.New())
			return
		}
		plugin.RegisterDriver(fakeplugin.New())
		return
	}
	dir, err := os.MkdirTemp("", "dm-plugins-")
	if err != nil {
		panic(err)
	}
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	pluginPath = filepath.Join(dir, BinaryName(fakeplugin.Name))
	if err := os.Symlink(self, pluginPath); err != nil {
		panic(err)
	}
	for _, name := range []string{"generic", "softlayer", "amazonec2", oldServicePlugin} {
		if err := os.Symlink(self, filepath.Join(dir, BinaryName(name))); err != nil {
			panic(err)
		}
	}
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// memStore is a Store in memory; failPut fails the nth Put from now, and
// crashPut stops the node controller (a panic, see crashed) at the nth Put
// from now, before it is written.
type memStore struct {
	mu       sync.Mutex
	records  map[string]Record
	failPut  int
	crashPut int
	failList bool
	// failDelete fails the next Delete, as a node controller that stops
	// between the plugin's Remove and the record's deletion.
	failDelete bool
	version    int // of the last write
}

func newMemStore() *memStore { return &memStore{records: map[string]Record{}} }

func (s *memStore) Get(_ context.Context, name string) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[name]
	if !ok {
		return Record{}, fmt.Errorf("machine %s: %w", name, drivers.ErrNotFound)
	}
	return r, nil
}

func (s *memStore) Put(_ context.Context, r *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failPut > 0 {
		s.failPut--
		if s.failPut == 0 {
			return errors.New("store unavailable")
		}
	}
	if s.crashPut > 0 {
		s.crashPut--
		if s.crashPut == 0 {
			panic(errCrash)
		}
	}
	if stored, ok := s.records[r.Name]; ok != (r.Version != "") || stored.Version != r.Version {
		return fmt.Errorf("machine %s: stored at version %q, written over %q", r.Name, stored.Version, r.Version)
	}
	s.version++
	r.Version = strconv.Itoa(s.version)
	s.records[r.Name] = *r
	return nil
}

func (s *memStore) Delete(_ context.Context, r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failDelete {
		s.failDelete = false
		return errors.New("store unavailable")
	}
	if stored, ok := s.records[r.Name]; ok && r.Version != "" && stored.Version != r.Version {
		return fmt.Errorf("machine %s: stored at version %q, deleted at %q", r.Name, stored.Version, r.Version)
	}
	delete(s.records, r.Name)
	return nil
}

func (s *memStore) List(context.Context) ([]Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failList {
		return nil, errors.New("store unavailable")
	}
	var out []Record
	for _, r := range s.records {
		out = append(out, r)
	}
	return out, nil
}

// errCrash is what crashPut panics with.
var errCrash = errors.New("the node controller stopped")

// crashed runs fn, which is to stop in the middle as a node controller
// that dies does: no more of its code runs, but the plugin processes it
// started go with it.
func crashed(t *testing.T, fn func()) {
	t.Helper()
	defer func() {
		require.Equal(t, errCrash, recover(), "the call stopped where the store crashed")
	}()
	fn()
}

// fakeJoiner hands out one token per machine and records what it forgot.
type fakeJoiner struct {
	mu        sync.Mutex
	tokens    map[string]string
	forgotten []string
}

func (j *fakeJoiner) Join(_ context.Context, machine string) (JoinConfig, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.tokens == nil {
		j.tokens = map[string]string{}
	}
	j.tokens[machine] = "abcdef.0123456789abcdef"
	return JoinConfig{APIServerURL: "https://127.0.0.1:6443", CACertBase64: "Q0E=", Token: j.tokens[machine]}, nil
}

func (j *fakeJoiner) Forget(_ context.Context, machine string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.forgotten = append(j.forgotten, machine)
	return nil
}

func fakeClass(dir string, options map[string]string) drivers.Class {
	opts := map[string]string{"fake-dir": dir}
	for k, v := range options {
		opts[k] = v
	}
	return drivers.Class{Name: "dm", Spec: nodesetv1alpha1.NodeClassSpec{
		Driver: nodesetv1alpha1.DriverDockerMachine,
		DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{
			DriverName: fakeplugin.Name, Options: opts,
			CredentialOptions: map[string]string{"fake-token": "token"},
		}},
	}, Credentials: map[string][]byte{"token": []byte("s3cret-token")}}
}

func newDriver(t *testing.T) (*Driver, *memStore, *fakeJoiner) {
	store, joiner := newMemStore(), &fakeJoiner{}
	return New(Options{Store: store, Joiner: joiner, StorePath: t.TempDir()}), store, joiner
}

// pluginProcesses counts running processes started from the plugin link.
func pluginProcesses(t *testing.T) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	n := 0
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && strings.HasPrefix(string(cmdline), pluginPath+"\x00") {
			n++
		}
	}
	return n
}

func assertNoPluginLeft(t *testing.T) {
	t.Helper()
	assert.Eventually(t, func() bool { return pluginProcesses(t) == 0 }, 5*time.Second, 50*time.Millisecond,
		"no plugin process outlives its call")
}

func TestCreateGetDeleteThroughPlugin(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-cpus": "4", "fake-tags": "a, b", "fake-debug": "true"})
	require.NoError(t, d.Validate(ctx, class))
	owner := drivers.Owner{Cluster: "c", Namespace: "team-a", Name: "web", UID: "uid-1"}

	id, err := d.Create(ctx, drivers.Machine{Name: "web-abcde", Owner: owner, Class: class})
	require.NoError(t, err)
	assert.Equal(t, "docker-machine://fake/web-abcde", id)
	machines, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	require.Contains(t, machines, "web-abcde")
	m := machines["web-abcde"]
	assert.Equal(t, 4, m.CPUs, "an int option arrives as an int")
	assert.Equal(t, []string{"a", "b"}, m.Tags, "a list option arrives as a list")
	assert.True(t, m.Debug, "a bool option arrives as a bool")
	assert.Equal(t, "s3cret-token", m.Token, "a credential option arrives from the Secret")

	again, err := d.Create(ctx, drivers.Machine{Name: "web-abcde", Owner: owner, Class: class})
	require.NoError(t, err, "Create is idempotent (the plugin would refuse a second machine of the name)")
	assert.Equal(t, id, again)
	machines, _ = fakeplugin.Machines(dir)
	assert.Len(t, machines, 1)

	status, err := d.Get(ctx, class, "web-abcde")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)
	assert.Equal(t, owner, status.Owner)
	list, err := d.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, id, list[0].ProviderID)
	assert.NotZero(t, list[0].CreatedAt)

	require.NoError(t, d.Delete(ctx, class, "web-abcde"))
	machines, _ = fakeplugin.Machines(dir)
	assert.Empty(t, machines, "the plugin removed the machine")
	assert.Empty(t, store.records, "and its record is gone")
	require.NoError(t, d.Delete(ctx, class, "web-abcde"), "Delete is idempotent")
	_, err = d.Get(ctx, class, "web-abcde")
	assert.ErrorIs(t, err, drivers.ErrNotFound)
	assertNoPluginLeft(t)
}

func TestValidateNamesTheOption(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	tests := []struct {
		name   string
		mutate func(*nodesetv1alpha1.DockerMachine)
		want   []string
	}{
		{"unknown option", func(dm *nodesetv1alpha1.DockerMachine) { dm.Options["fake-cpu"] = "4" },
			[]string{"spec.dockerMachine.options[fake-cpu]", `"fake-cpu" is not an option of plugin docker-machine-driver-fake`, "fake-cpus"}},
		{"int option not a number", func(dm *nodesetv1alpha1.DockerMachine) { dm.Options["fake-cpus"] = "four" },
			[]string{"spec.dockerMachine.options[fake-cpus]", `"four" is not an integer`}},
		{"bool option not a bool", func(dm *nodesetv1alpha1.DockerMachine) { dm.Options["fake-debug"] = "maybe" },
			[]string{"spec.dockerMachine.options[fake-debug]", `"maybe" is not true or false`}},
		{"unknown credential option", func(dm *nodesetv1alpha1.DockerMachine) { dm.CredentialOptions["fake-secret"] = "token" },
			[]string{"spec.dockerMachine.credentialOptions[fake-secret]", `"fake-secret" is not an option`}},
		{"user-data option unknown", func(dm *nodesetv1alpha1.DockerMachine) {
			dm.Provisioning = &nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData, UserDataOption: "fake-user-data"}
		}, []string{"spec.dockerMachine.provisioning.userDataOption", `"fake-user-data" is not an option`}},
		{"user-data option not a file name", func(dm *nodesetv1alpha1.DockerMachine) {
			dm.Provisioning = &nodesetv1alpha1.MachineProvisioning{Method: nodesetv1alpha1.ProvisioningUserData, UserDataOption: "fake-cpus"}
		}, []string{"spec.dockerMachine.provisioning.userDataOption", `option "fake-cpus" does not take a file name`}},
		{"plugin missing", func(dm *nodesetv1alpha1.DockerMachine) { dm.DriverName = "nope" },
			[]string{"spec.dockerMachine.driverName", "plugin binary docker-machine-driver-nope is not installed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class := fakeClass(dir, nil)
			tt.mutate(class.Spec.DockerMachine)
			err := d.Validate(ctx, class)
			require.Error(t, err)
			assert.ErrorIs(t, err, drivers.ErrInvalidConfiguration)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
			assert.NotContains(t, err.Error(), "s3cret-token")
		})
	}
	// A credential that does not fit its option is named by key, its value never shown.
	class := fakeClass(dir, nil)
	class.Spec.DockerMachine.CredentialOptions = map[string]string{"fake-cpus": "token"}
	_, err := d.Create(ctx, drivers.Machine{Name: "x", Class: class})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the value of credentials key "token" does not fit option "fake-cpus"`)
	assert.NotContains(t, err.Error(), "s3cret-token")
	machines, _ := fakeplugin.Machines(dir)
	assert.Empty(t, machines, "nothing was created")
	assertNoPluginLeft(t)
}

// TestCrashInTheMiddleOfCreate: the record is written before the plugin's
// Create, so whichever step a crash interrupts, the next Create finds the
// machine, or Delete removes what there is, and nothing leaks.
func TestCrashInTheMiddleOfCreate(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, nil)

	// The machine was made but the node controller died before recording it.
	store.crashPut = 2
	crashed(t, func() { _, _ = d.Create(ctx, drivers.Machine{Name: "m1", Class: class}) })
	require.False(t, store.records["m1"].Created)
	machines, _ := fakeplugin.Machines(dir)
	require.Contains(t, machines, "m1")
	id, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: class})
	require.NoError(t, err, "the retry finds the machine through the plugin")
	assert.Equal(t, "docker-machine://fake/m1", id)
	assert.True(t, store.records["m1"].Created)
	machines, _ = fakeplugin.Machines(dir)
	assert.Len(t, machines, 1, "and does not make a second one")

	// The plugin's Create failed: it is undone at once (the plugin's
	// Remove, the machine's files, its record), and the next attempt
	// starts afresh and succeeds.
	failing := fakeClass(dir, map[string]string{"fake-fail-create": "true"})
	_, err = d.Create(ctx, drivers.Machine{Name: "m2", Class: failing})
	require.ErrorContains(t, err, "fake: out of machines")
	_, err = d.Get(ctx, failing, "m2")
	assert.ErrorIs(t, err, drivers.ErrNotFound, "no record is left of a failed Create")
	assert.NoDirExists(t, d.machineDir("m2"), "nor its files")
	_, err = d.Create(ctx, drivers.Machine{Name: "m2", Class: class})
	require.NoError(t, err, "the next attempt succeeds")
	require.NoError(t, d.Delete(ctx, class, "m2"))
	_, err = d.Get(ctx, failing, "m2")
	assert.ErrorIs(t, err, drivers.ErrNotFound)

	store.failList = true
	_, err = d.List(ctx)
	assert.Error(t, err, "List fails instead of returning part of the machines")
	assertNoPluginLeft(t)
}

// TestAClosedFenceStopsThePluginsChanges: a replica that may no longer
// lead makes and removes no machine, whatever step of a Create or Delete
// it is at, and leaves what it did not do for the next attempt.
func TestAClosedFenceStopsThePluginsChanges(t *testing.T) {
	ctx := context.Background()
	store, joiner := newMemStore(), &fakeJoiner{}
	var closed atomic.Bool
	d := New(Options{Store: store, Joiner: joiner, StorePath: t.TempDir(), Fence: func() error {
		if closed.Load() {
			return errors.New("this replica does not lead")
		}
		return nil
	}})
	dir := t.TempDir()
	class := fakeClass(dir, nil)

	closed.Store(true)
	_, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: class})
	require.ErrorContains(t, err, "not creating the machine: this replica does not lead")
	machines, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	assert.Empty(t, machines, "no machine made")
	_, err = d.Get(ctx, class, "m1")
	assert.ErrorIs(t, err, drivers.ErrNotFound, "and no record left: the plugin says there is no machine")

	closed.Store(false)
	_, err = d.Create(ctx, drivers.Machine{Name: "m1", Class: class})
	require.NoError(t, err)
	closed.Store(true)
	err = d.Delete(ctx, class, "m1")
	require.ErrorContains(t, err, "not removing the machine: this replica does not lead")
	machines, _ = fakeplugin.Machines(dir)
	assert.Contains(t, machines, "m1", "the machine is still there")
	status, err := d.Get(ctx, class, "m1")
	require.NoError(t, err, "and so is its record")
	assert.Equal(t, drivers.MachineRunning, status.State)

	closed.Store(false)
	require.NoError(t, d.Delete(ctx, class, "m1"))
	machines, _ = fakeplugin.Machines(dir)
	assert.Empty(t, machines)
	assertNoPluginLeft(t)
}

func TestUserDataProvisioning(t *testing.T) {
	ctx := context.Background()
	// The user-data file's directory is the test's own: other tests'
	// processes killed mid-Create leave theirs in the shared one.
	t.Setenv("TMPDIR", t.TempDir())
	d, _, joiner := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	class.Spec.DockerMachine.Provisioning = &nodesetv1alpha1.MachineProvisioning{
		Method: nodesetv1alpha1.ProvisioningUserData, UserDataOption: "fake-userdata", KubernetesVersion: "v1.37.2",
	}
	_, err := d.Create(ctx, drivers.Machine{Name: "web-u1", Class: class})
	require.NoError(t, err)
	machines, _ := fakeplugin.Machines(dir)
	userData := machines["web-u1"].UserData
	assert.True(t, strings.HasPrefix(userData, "#!/bin/sh\n"), userData)
	for _, want := range []string{"export NODE_NAME='web-u1'", "export BOOTSTRAP_TOKEN='abcdef.0123456789abcdef'",
		"export API_SERVER_URL='https://127.0.0.1:6443'", "export KUBERNETES_VERSION='v1.37.2'", "--hostname-override=${NODE_NAME}"} {
		assert.Contains(t, userData, want)
	}
	leftovers, _ := filepath.Glob(filepath.Join(os.TempDir(), "nodeset-userdata-*"))
	assert.Empty(t, leftovers, "the user-data file is removed once the plugin has read it")

	require.NoError(t, d.Delete(ctx, class, "web-u1"))
	assert.Equal(t, []string{"web-u1"}, joiner.forgotten, "the bootstrap token goes with the machine")
}

func TestSSHProvisioning(t *testing.T) {
	sshd := startSSHD(t)
	ctx := context.Background()
	var fenceMu sync.Mutex
	allowed := -1 // the fence's answers still yes; -1: every one
	d := New(Options{Store: newMemStore(), Joiner: &fakeJoiner{}, StorePath: t.TempDir(), Fence: func() error {
		fenceMu.Lock()
		defer fenceMu.Unlock()
		if allowed == 0 {
			return errors.New("this replica does not lead")
		}
		if allowed > 0 {
			allowed--
		}
		return nil
	}})
	dir, out := t.TempDir(), t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-ssh-port": fmt.Sprint(sshd.Port), "fake-ssh-user": sshd.User, "fake-ssh-key": sshd.KeyFile})
	class.Spec.DockerMachine.Provisioning = &nodesetv1alpha1.MachineProvisioning{
		Method: nodesetv1alpha1.ProvisioningSSH,
		Script: fmt.Sprintf("echo \"$NODE_NAME $API_SERVER_URL $BOOTSTRAP_TOKEN\" > %s/joined-$NODE_NAME\n", out),
	}
	for _, name := range []string{"web-s1", "web-s2"} {
		_, err := d.Create(ctx, drivers.Machine{Name: name, Class: class})
		require.NoError(t, err)
	}
	var joined []string
	for _, name := range []string{"web-s1", "web-s2"} {
		data, err := os.ReadFile(filepath.Join(out, "joined-"+name))
		require.NoError(t, err, "the join script ran over SSH for %s", name)
		joined = append(joined, strings.TrimSpace(string(data)))
	}
	sort.Strings(joined)
	assert.Equal(t, []string{
		"web-s1 https://127.0.0.1:6443 abcdef.0123456789abcdef",
		"web-s2 https://127.0.0.1:6443 abcdef.0123456789abcdef",
	}, joined)

	// A failing script fails Create, naming the machine; the next Create
	// runs it again on the same machine (as after a crash mid-provisioning).
	script := class.Spec.DockerMachine.Provisioning.Script
	class.Spec.DockerMachine.Provisioning.Script = "exit 3"
	_, err := d.Create(ctx, drivers.Machine{Name: "web-s3", Class: class})
	require.ErrorContains(t, err, "machine web-s3: the join script failed over SSH")
	class.Spec.DockerMachine.Provisioning.Script = script
	_, err = d.Create(ctx, drivers.Machine{Name: "web-s3", Class: class})
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(out, "joined-web-s3"))
	require.NoError(t, err, "the join script ran on the retry")
	machines, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	assert.Len(t, machines, 3, "on the machine made the first time, not a new one")
	require.NoError(t, d.Delete(ctx, class, "web-s3"))

	// A replica that stops leading between making the machine and joining
	// it does not run the join script; the next attempt does, on the same
	// machine.
	fenceMu.Lock()
	allowed = 1
	fenceMu.Unlock()
	_, err = d.Create(ctx, drivers.Machine{Name: "web-s4", Class: class})
	require.ErrorContains(t, err, "machine web-s4: not running the join script: this replica does not lead")
	assert.NoFileExists(t, filepath.Join(out, "joined-web-s4"))
	fenceMu.Lock()
	allowed = -1
	fenceMu.Unlock()
	_, err = d.Create(ctx, drivers.Machine{Name: "web-s4", Class: class})
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(out, "joined-web-s4"))
	machines, err = fakeplugin.Machines(dir)
	require.NoError(t, err)
	assert.Len(t, machines, 3, "web-s4 was made once")
	assertNoPluginLeft(t)
}

func TestCrashBetweenRemoveAndForget(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	_, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: class})
	require.NoError(t, err)

	// The plugin removed the machine; the record outlived it.
	store.failDelete = true
	require.Error(t, d.Delete(ctx, class, "m1"))
	machines, _ := fakeplugin.Machines(dir)
	require.Empty(t, machines)
	require.Contains(t, store.records, "m1")
	// The next Delete: the plugin's Remove fails (the machine is gone), its
	// GetState says so, and the record goes.
	require.NoError(t, d.Delete(ctx, class, "m1"))
	assert.NotContains(t, store.records, "m1")

	// A Remove that fails while the plugin still sees the machine keeps
	// the record: nothing is forgotten that might still run.
	_, err = d.Create(ctx, drivers.Machine{Name: "m2", Class: class})
	require.NoError(t, err)
	stuck := filepath.Join(dir, "m2.json")
	require.NoError(t, os.Remove(stuck))
	require.NoError(t, os.MkdirAll(filepath.Join(stuck, "busy"), 0o755)) // os.Remove fails on it; Stat succeeds
	err = d.Delete(ctx, class, "m2")
	require.ErrorContains(t, err, "removing machine m2")
	assert.Contains(t, store.records, "m2")
	require.NoError(t, os.RemoveAll(stuck))
	require.NoError(t, d.Delete(ctx, class, "m2"))
	assert.NotContains(t, store.records, "m2")
	assertNoPluginLeft(t)
}

func TestMachineGone(t *testing.T) {
	for msg, gone := range map[string]bool{
		"fake: machine m1 not found":                               true,
		"Error: instance i-123 does not exist":                     true,
		"InvalidInstanceID.NotFound: The instance ID is bogus":     true,
		"open /var/lib/x.json: no such file or directory":          false,
		"dial tcp: lookup api.test on 10.96.0.10:53: no such host": false,
		`exec: "VBoxManage": executable file not found in $PATH`:   false,
		"Error: No such container: m1":                             true,
		"RequestLimitExceeded: Request limit exceeded":             false,
		"dial tcp 10.0.0.1:443: connection refused":                false,
		"unexpected EOF": false,
		// Credentials the cloud did not take say nothing of the machine.
		`azure.BearerAuthorizer#WithAuthorization: Failed to refresh the Token for request: StatusCode=400 -- Original Error: adal: Refresh request failed. Status Code = '400'. Response body: {"error":"unauthorized_client","error_description":"AADSTS700016: Application with identifier '0f0e' was not found in the directory 'contoso'."}`: false,
		"Failed to authenticate using client credentials: Header WWW-Authenticate not found in Get Subscription response":                                       false,
		"InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our records.":                                                                 false,
		`Status=404 Code="ResourceNotFound" Message="The Resource 'Microsoft.Compute/virtualMachines/m1' under resource group 'docker-machine' was not found."`: true,
	} {
		assert.Equal(t, gone, machineGone(errors.New(msg), "m1"), msg)
	}
	// A machine's name is not what is said of it.
	for _, tt := range []struct {
		name, msg string
		gone      bool
	}{
		{"credentials-7xk2p", "fake: machine credentials-7xk2p not found", true},
		{"login-authorized-1", "instance login-authorized-1 does not exist", true},
		{"credentials-7xk2p", "fake: machine credentials-7xk2p not found: AuthFailure: credentials not accepted", false},
		{"host", "lookup api.test: no such host", false},
	} {
		assert.Equal(t, tt.gone, machineGone(errors.New(tt.msg), tt.name), "%s: %s", tt.name, tt.msg)
	}
}
