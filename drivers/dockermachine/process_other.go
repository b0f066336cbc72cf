//go:build !unix

package dockermachine

import "os/exec"

func ownProcessGroup(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
