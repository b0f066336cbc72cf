package framework

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSupervisedProcessIsRestartedUntilKilled: a supervised process that
// exits by itself (as a controller does when it loses its lease) runs again,
// as a Deployment's container would; one the test kills stays stopped.
func TestSupervisedProcessIsRestartedUntilKilled(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran-once")
	// The first run exits at once with an error; the next ones stay up.
	p := &Process{Name: "once", Path: "/bin/sh", Supervised: true,
		Args: []string{"-c", `if [ -e "$0" ]; then echo second; exec sleep 300; fi; : > "$0"; echo first; exit 3`, marker}}
	require.NoError(t, p.Start())
	t.Cleanup(func() { p.Kill(syscall.SIGKILL) })

	require.True(t, p.RestartedSince(0, time.Minute), "restarted after exiting by itself")
	assert.Equal(t, 1, p.Restarts())
	assert.True(t, p.Running())
	assert.Contains(t, p.Logs(), "exited by itself: exit status 3; restarted")
	assert.Contains(t, p.Logs(), "first")

	state, forced := p.Kill(syscall.SIGKILL)
	require.NotNil(t, state)
	assert.False(t, forced)
	assert.False(t, p.Running(), "a killed process is not restarted")
	assert.Equal(t, 1, p.Restarts())
	assert.False(t, p.RestartedSince(1, 0), "no restart after Kill")

	require.NoError(t, p.Start(), "Start runs it again")
	assert.True(t, p.Running())
}

// TestUnsupervisedProcessStaysExited: without supervision an exit is final
// until Start, and Exited collects it.
func TestUnsupervisedProcessStaysExited(t *testing.T) {
	p := &Process{Name: "exits", Path: "/bin/sh", Args: []string{"-c", "exit 0"}}
	require.NoError(t, p.Start())
	require.True(t, p.Exited(time.Minute))
	assert.False(t, p.Running())
	assert.Zero(t, p.Restarts())
}

// TestCrashesAreRecorded: a supervised run that ended in a panic is
// restarted and recorded as a crash; an ordinary exit is not a crash.
func TestCrashesAreRecorded(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran-once")
	p := &Process{Name: "panics", Path: "/bin/sh", Supervised: true,
		Args: []string{"-c", `if [ -e "$0" ]; then exec sleep 300; fi; : > "$0"; echo "panic: runtime error: index out of range" >&2; exit 2`, marker}}
	require.NoError(t, p.Start())
	t.Cleanup(func() { p.Kill(syscall.SIGKILL) })
	require.True(t, p.RestartedSince(0, time.Minute))
	assert.Equal(t, []string{"panic: runtime error: index out of range"}, p.Crashes())

	assert.Empty(t, crashLine("lost the lease\nexiting\n"), "a lost lease is not a crash")
	assert.Equal(t, "fatal error: concurrent map writes", crashLine("x\nfatal error: concurrent map writes\ngoroutine 1"))
}
