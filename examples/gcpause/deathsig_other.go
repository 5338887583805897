//go:build !linux

package main

import "os/exec"

// setDeathSignal has no portable equivalent outside Linux; the orchestrator kills
// its workers itself on every exit path it controls.
func setDeathSignal(c *exec.Cmd) {}
