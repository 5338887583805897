package scenario

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel kill a worker whose test process died first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped returns once every thread of process pid is stopped: a SIGSTOP is
// delivered when each thread next enters the kernel, so a running thread may go on
// for a moment after kill returns.
func waitStopped(pid int) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	for {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return // the process is gone
		}
		stopped := true
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				continue
			}
			// The state follows the command, which is in parentheses.
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
				stopped = false
			}
		}
		if stopped {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
