package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// blackhole is an etcd endpoint that accepts TCP and never answers; accepted
// gets a value for each connection.
func blackhole(t *testing.T) (endpoint string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 100)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String(), ch
}

// TestRunMain_signal sends SIGINT or SIGTERM to a fencectl process whose etcd
// never answers: each command ends, saying it was interrupted, with a status
// that says so (watch, which runs until interrupted, ends with 0).
func TestRunMain_signal(t *testing.T) {
	tests := []struct {
		name   string
		sig    os.Signal
		args   []string
		code   int
		errOut string
	}{
		{"list SIGINT", os.Interrupt, []string{"list"}, exitInterrupted, "fencectl list: interrupted"},
		{"show SIGTERM", syscall.SIGTERM, []string{"show", "job"}, exitInterrupted, "fencectl show: interrupted"},
		{"release SIGTERM", syscall.SIGTERM, []string{"release", "job", "7"}, exitInterrupted, "fencectl release: interrupted"},
		{"exec SIGINT", os.Interrupt, []string{"exec", "job", "--", "true"}, exitInterrupted, "fencectl exec: interrupted while waiting for the lock"},
		{"exec SIGTERM", syscall.SIGTERM, []string{"exec", "job", "--", "true"}, exitInterrupted, "fencectl exec: interrupted while waiting for the lock"},
		{"watch SIGTERM", syscall.SIGTERM, []string{"watch", "job"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, accepted := blackhole(t)
			// -timeout 1h: only the signal can end the command here.
			cmd := exec.Command(os.Args[0], append([]string{"-endpoints", ep, "-timeout", "1h"}, tt.args...)...)
			cmd.Env = append(os.Environ(), asFencectlEnv+"=1")
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			<-accepted // dialing etcd: past runMain's signal handler
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode() // -1 if the signal killed it
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(errOut.String(), tt.errOut) {
				t.Fatalf("status %d, stderr %q; want %d and %q", code, errOut.String(), tt.code, tt.errOut)
			}
		})
	}
}
