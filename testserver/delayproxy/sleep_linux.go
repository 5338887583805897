package delayproxy

import (
	"syscall"
	"time"
)

// prSetTimerSlack is PR_SET_TIMERSLACK from linux/prctl.h.
const prSetTimerSlack = 29

// fineTimerSlack sets this OS thread's timer slack to 1 ns: the kernel's default
// (50 µs) would be added to every sleep.
func fineTimerSlack() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
}

// waitUntil returns at t, give or take the kernel's timer slack: the Go runtime's
// sleep for all but the last millisecond, nanosleep for the rest.
func waitUntil(t time.Time) {
	if d := time.Until(t); d > 2*time.Millisecond {
		time.Sleep(d - time.Millisecond)
	}
	for d := time.Until(t); d > 0; d = time.Until(t) {
		ts := syscall.NsecToTimespec(int64(d))
		_ = syscall.Nanosleep(&ts, nil)
	}
}
