package dockermachine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/drivers/dockermachine/fakeplugin"
)

// zombies counts this process's children that exited and were not waited for.
func zombies(t *testing.T) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	n := 0
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(data)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[0] == "Z" && fields[1] == strconv.Itoa(os.Getpid()) {
			n++
		}
	}
	return n
}

// assertNothingLeaks checks that no plugin call left a process, a zombie or
// a goroutine behind, against the goroutines counted before.
func assertNothingLeaks(t *testing.T, goroutines int) {
	t.Helper()
	assertNoPluginLeft(t)
	assert.Zero(t, zombies(t), "every plugin process is waited for")
	assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines+2 }, 10*time.Second, 50*time.Millisecond,
		"no goroutine outlives its plugin")
}

// installPlugin puts an executable docker-machine-driver-<name> with script
// on PATH for the test.
func installPlugin(t *testing.T, name, script string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, BinaryName(name)), []byte(script), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// TestPluginThatExitsAtOnce: a plugin binary that exits before serving (a
// broken build, a missing library) fails the call with what it said, and
// leaves no zombie process or goroutine behind, however often it is tried.
func TestPluginThatExitsAtOnce(t *testing.T) {
	installPlugin(t, "broken", "#!/bin/sh\necho 'error while loading shared libraries: libvirt.so.0' >&2\nexit 127\n")
	ctx := context.Background()
	d, _, _ := newDriver(t)
	class := fakeClass(t.TempDir(), nil)
	class.Spec.DockerMachine.DriverName = "broken"
	goroutines := runtime.NumGoroutine()
	for range 5 {
		err := d.Validate(ctx, class)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "docker-machine-driver-broken")
		assert.Contains(t, err.Error(), "exited before serving (exit status 127)")
		assert.Contains(t, err.Error(), "libvirt.so.0", "the error says why the plugin stopped")
	}
	assertNothingLeaks(t, goroutines)
}

// TestPluginWhoseConfigDoesNotFit: a saved configuration the plugin refuses
// (written by an older version of it, or edited) is an error of the call
// that needs it, not a crash of the node controller.
func TestPluginWhoseConfigDoesNotFit(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	class := fakeClass(t.TempDir(), nil)
	goroutines := runtime.NumGoroutine()
	store.records["m1"] = Record{Name: "m1", Plugin: fakeplugin.Name, Config: []byte(`{"MachineName":"m1","CPUs":"four"}`), Created: true, Provisioned: true, Version: "1"}
	assert.NotPanics(t, func() {
		_, err := d.Get(ctx, class, "m1")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "loading the machine's saved configuration")
		assert.Contains(t, err.Error(), "cannot unmarshal")
		err = d.Delete(ctx, class, "m1")
		require.Error(t, err)
		assert.Contains(t, store.records, "m1", "a machine the plugin cannot load is not forgotten")
	})
	assertNothingLeaks(t, goroutines)
}

// TestPluginThatPrintsLongLines: a plugin that prints a line longer than
// any buffer (a cloud SDK's debug dump) is not blocked on its output; the
// line is not logged whole.
func TestPluginThatPrintsLongLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-chatter": strconv.Itoa(1 << 20)})
	goroutines := runtime.NumGoroutine()
	done := make(chan error, 1)
	go func() {
		_, err := d.Create(ctx, drivers.Machine{Name: "chatty", Class: class})
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return: the plugin is blocked writing its output")
	}
	machines, err := fakeplugin.Machines(dir)
	require.NoError(t, err)
	assert.Contains(t, machines, "chatty")
	require.NoError(t, d.Delete(ctx, class, "chatty"))
	assertNothingLeaks(t, goroutines)
}

// TestCancelStopsAHungPlugin: a plugin call that never returns ends when
// the call's context does (the node controller stopping or losing its
// lease); the plugin process goes, and the next attempt undoes the
// unfinished Create and makes the machine.
func TestCancelStopsAHungPlugin(t *testing.T) {
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	hanging := fakeClass(dir, map[string]string{"fake-hang-create": "true"})
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := d.Create(ctx, drivers.Machine{Name: "hung", Class: hanging})
		done <- err
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "hung.hanging"))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the plugin's Create started")
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.True(t, errors.Is(err, context.Canceled), err.Error())
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return after its context was canceled")
	}
	assertNoPluginLeft(t)
	assert.False(t, store.records["hung"].Created)

	_, err := d.Create(context.Background(), drivers.Machine{Name: "hung", Class: fakeClass(dir, nil)})
	require.NoError(t, err, "the next attempt makes the machine")
	require.NoError(t, d.Delete(context.Background(), hanging, "hung"))
	assertNothingLeaks(t, goroutines)
}

// TestPluginThatCrashesListingItsFlags: a plugin that dies while asked for
// its flags (killed for memory, a crash) fails that call, and is asked
// again by the next: its options are not taken to be none, which would
// make every class of the plugin invalid until its binary changes.
func TestPluginThatCrashesListingItsFlags(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	class := fakeClass(t.TempDir(), nil)
	require.NoError(t, os.WriteFile(filepath.Join(d.storePath, fakeplugin.CrashFlagsFile), nil, 0o600))
	err := d.Validate(ctx, class)
	require.Error(t, err, "the plugin crashed: its flags are not known")
	assert.NotErrorIs(t, err, drivers.ErrInvalidConfiguration, "a crash says nothing of the class")
	assert.Contains(t, err.Error(), "asking plugin docker-machine-driver-fake for its flags")
	require.NoError(t, d.Validate(ctx, class), "the next call asks the plugin again")
	assertNoPluginLeft(t)
}

// TestACredentialInThePluginsAddress: the address a plugin prints to be
// dialled is not plugin text to scrub; a credential value that happens to
// be part of it (a host kept secret, given through credentialOptions) does
// not keep this or any other class's plugins from being reached.
func TestACredentialInThePluginsAddress(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	secretHost := fakeClass(dir, nil)
	secretHost.Credentials["host"] = []byte("127.0.0.1")
	secretHost.Spec.DockerMachine.CredentialOptions["fake-ssh-host"] = "host"
	_, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: secretHost})
	require.NoError(t, err)
	other := fakeClass(dir, nil)
	_, err = d.Create(ctx, drivers.Machine{Name: "m2", Class: other})
	require.NoError(t, err)
	require.NoError(t, d.Delete(ctx, secretHost, "m1"))
	require.NoError(t, d.Delete(ctx, other, "m2"))
	assertNoPluginLeft(t)
}

// TestPluginErrorsAreBounded: a plugin whose cloud answers with a page of
// megabytes (quoting a credential all along) fails the call with an error
// of a few KiB, scrubbed before it is cut, so no part of a credential is
// left at the cut; what the node controller stores, shows and logs of it
// stays small.
func TestPluginErrorsAreBounded(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	const token = "planted-token-Bq72Lw90xYz"
	class := fakeClass(dir, map[string]string{"fake-error-bytes": strconv.Itoa(4 << 20)})
	class.Credentials["token"] = []byte(token)
	_, err := d.Create(ctx, drivers.Machine{Name: "paged", Class: class})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plugin docker-machine-driver-fake creating machine paged: fake: the cloud answered")
	assert.LessOrEqual(t, len(err.Error()), 8<<10, "the error is bounded")
	assert.NotContains(t, err.Error(), token[:8], "no part of the credential is left")
	assert.Contains(t, err.Error(), "[redacted:token]")
	assert.NotContains(t, store.records, "paged", "the failed Create was undone")
	assertNoPluginLeft(t)
}

// TestCancelStopsAHungPluginAndItsChildren: a plugin hung in Create while
// it waits on a process it started (a cloud CLI, ssh, a hypervisor's tool)
// is stopped with that process when the call's context ends: no process,
// zombie or goroutine is left behind.
func TestCancelStopsAHungPluginAndItsChildren(t *testing.T) {
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-hang-create": "true", "fake-hang-child": "true"})
	goroutines := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := d.Create(ctx, drivers.Machine{Name: "hung", Class: class})
		done <- err
	}()
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "hung.hanging"))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the plugin's Create started")
	data, err := os.ReadFile(filepath.Join(dir, "hung.child"))
	require.NoError(t, err)
	child, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return after its context was canceled")
	}
	assert.Eventually(t, func() bool { return !running(child) }, 10*time.Second, 50*time.Millisecond,
		"the plugin's child process goes with it")
	assertNothingLeaks(t, goroutines)
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// oldServicePlugin is the fake plugin built with a libmachine before 0.5.1,
// which serves its RPC service as RpcServerDriver only.
const oldServicePlugin = "fakeold"

// TestPluginOfAnOldLibmachine: a plugin that serves the RPC service under
// libmachine's name before 0.5.1 (RpcServerDriver), as libmachine's client
// allows, makes, reports and removes machines; its heartbeats and its close
// go to that name too, so it neither exits while a call is in flight nor
// has to be killed.
func TestPluginOfAnOldLibmachine(t *testing.T) {
	ctx := context.Background()
	d, store, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, nil)
	class.Spec.DockerMachine.DriverName = oldServicePlugin
	require.NoError(t, d.Validate(ctx, class))
	_, err := d.Create(ctx, drivers.Machine{Name: "m1", Class: class})
	require.NoError(t, err)
	require.True(t, store.records["m1"].Created)
	status, err := d.Get(ctx, class, "m1")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)
	require.NoError(t, d.Delete(ctx, class, "m1"))
	names, err := fakeplugin.MachineNames(dir)
	require.NoError(t, err)
	assert.Empty(t, names)

	home := t.TempDir()
	p, closePlugin, err := RPCOpener{Home: home}.Open(ctx, oldServicePlugin, d.baseConfig("m2"))
	require.NoError(t, err)
	_, err = p.CreateFlags()
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(home, fakeplugin.HeartbeatsFile))
		return err == nil
	}, 3*pluginHeartbeat, 100*time.Millisecond, "the plugin gets its heartbeats")
	closePlugin()
	assert.FileExists(t, filepath.Join(home, fakeplugin.ClosedFile), "the plugin exited on being told to close, not killed")
}

// TestPluginThatExitsCleanlyBeforeServing: a binary that exits with status
// 0 without serving (not a plugin at all, or one that only prints its
// usage) is told apart from one that failed, with what it printed.
func TestPluginThatExitsCleanlyBeforeServing(t *testing.T) {
	installPlugin(t, "usage", "#!/bin/sh\necho 'usage: docker-machine-driver-usage [flags]' >&2\nexit 0\n")
	d, _, _ := newDriver(t)
	class := fakeClass(t.TempDir(), nil)
	class.Spec.DockerMachine.DriverName = "usage"
	goroutines := runtime.NumGoroutine()
	err := d.Validate(context.Background(), class)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plugin docker-machine-driver-usage exited before serving (exit status 0)")
	assert.NotContains(t, err.Error(), "<nil>")
	assert.Contains(t, err.Error(), "usage: docker-machine-driver-usage", "the error says what it printed")
	assertNothingLeaks(t, goroutines)
}

// TestAPluginWhoseDaemonKeepsItsOutputIsReaped: a plugin may start a
// process that leaves its process group and outlives it (a VM process
// in a session of its own, a helper daemon) with the plugin's stdout and
// stderr as its own. Once the plugin has exited, or been killed, its output
// is let go of, so the plugin is reaped: no zombie process, no goroutine
// left per call for as long as that process runs.
func TestAPluginWhoseDaemonKeepsItsOutputIsReaped(t *testing.T) {
	ctx := context.Background()
	d, _, _ := newDriver(t)
	dir := t.TempDir()
	class := fakeClass(dir, map[string]string{"fake-daemon": "true"})
	goroutines := runtime.NumGoroutine()
	_, err := d.Create(ctx, drivers.Machine{Name: "vm", Class: class})
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, "vm.daemon"))
	require.NoError(t, err)
	daemon, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(daemon, syscall.SIGKILL) })
	require.True(t, running(daemon), "the plugin's daemon outlives the plugin, holding its output")

	assertNothingLeaks(t, goroutines)
	status, err := d.Get(ctx, class, "vm")
	require.NoError(t, err)
	assert.Equal(t, drivers.MachineRunning, status.State)
	require.NoError(t, d.Delete(ctx, class, "vm"))
	assertNothingLeaks(t, goroutines)
}
