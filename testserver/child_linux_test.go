package testserver_test

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/testserver"
)

// TestStartChild_survivesForkingThreadExit ends the OS thread a goroutine was locked
// to (as the delaying proxy's writer does when it returns). A child with Pdeathsig
// forked by a plain cmd.Start on that thread is killed with it; one started through
// StartChild from the same goroutine lives on.
func TestStartChild_survivesForkingThreadExit(t *testing.T) {
	sleeper := func() *exec.Cmd {
		c := exec.Command("sleep", "600")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return c
	}
	plain, kept := sleeper(), sleeper()
	var keptExited <-chan struct{}
	errs := make(chan error, 2)
	onThread(t, func() {
		errs <- plain.Start()
		var err error
		keptExited, err = testserver.StartChild(kept)
		errs <- err
	})
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = kept.Process.Kill()
		<-keptExited
	})
	// The control: the plain child dies with its thread, so the thread did end.
	plainDone := make(chan error, 1)
	go func() { plainDone <- plain.Wait() }()
	select {
	case <-plainDone:
	case <-t.Context().Done():
		_ = plain.Process.Kill()
		t.Fatal("the plain child outlived its thread: the test proves nothing")
	}
	// Pdeathsig went out when the thread ended, before the plain child died; give a
	// signal to the kept child, had there been one, time to land.
	time.Sleep(100 * time.Millisecond)
	select {
	case <-keptExited:
		t.Fatalf("the child started through StartChild died with the thread: %v", kept.ProcessState)
	default:
	}
}

// onThread runs fn on a goroutine locked to an OS thread that the runtime ends when fn
// returns. The main thread is never ended (the runtime parks it instead), so a
// goroutine that lands there holds it until the test ends and fn goes to another.
func onThread(t *testing.T, fn func()) {
	for {
		onMain := make(chan bool)
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				onMain <- true
				<-t.Context().Done()
				runtime.UnlockOSThread()
				return
			}
			onMain <- false
			fn() // returns still locked: the thread ends
		}()
		if !<-onMain {
			return
		}
	}
}
