package testserver

import "syscall"

// ProcAttr runs a server as cred (nil: this process's user) in its own process
// group, killed by the kernel when the process that started it dies (Pdeathsig):
// start it with StartChild.
func ProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
