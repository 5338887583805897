//go:build !linux

package scenario

import (
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped gives a SIGSTOP a moment to reach every thread; Linux checks.
func waitStopped(int) { time.Sleep(50 * time.Millisecond) }
