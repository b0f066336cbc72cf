//go:build unix

package dockermachine

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own, so that the
// processes a plugin starts (a cloud's CLI, ssh, a hypervisor's tool) can
// be stopped with it.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills a plugin started by ownProcessGroup and every process
// still in its group: one left would hold the plugin's output open.
func killGroup(cmd *exec.Cmd) {
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		_ = cmd.Process.Kill()
	}
}
