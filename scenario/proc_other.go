//go:build !linux

package scenario

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
