//go:build unix

package fakeplugin

import (
	"os/exec"
	"syscall"
)

// newSession starts cmd in a session (and process group) of its own.
func newSession(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }
