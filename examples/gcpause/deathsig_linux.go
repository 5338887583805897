package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill a worker when the orchestrator dies, so that an
// interrupted run never leaves a frozen worker behind.
func setDeathSignal(c *exec.Cmd) {
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
