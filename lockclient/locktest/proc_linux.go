package locktest

import "syscall"

// sysProcAttr makes the kernel kill a member when the test binary dies without
// its cleanup (a crash, a timeout's panic), so none is left behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
