package scenario

import "syscall"

// sysProcAttr makes the kernel kill a worker whose test process died first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
