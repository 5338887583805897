//go:build !linux

package testserver

import "syscall"

// ProcAttr runs a server as cred (nil: this process's user) in its own process
// group. Outside Linux there is no Pdeathsig: a test binary killed without its
// cleanup leaves the server running.
func ProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
