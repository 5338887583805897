//go:build !linux

package locktest

import "syscall"

// sysProcAttr puts a member in its own process group; without Pdeathsig outside
// Linux, a member outlives a test binary that dies without its cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
