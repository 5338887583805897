package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRun_unreachableQuiet runs fencectl list as its own process against an
// address that accepts no connection: stderr holds fencectl's own error and
// not one line of etcd's client or grpc's logs.
func TestRun_unreachableQuiet(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(os.Args[0], "-endpoints", addr, "-timeout", "2s", "list")
	cmd.Env = append(os.Environ(), asFencectlEnv+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("fencectl list: %v, want exit status 1; stderr %q", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "fencectl list: cannot reach etcd at "+addr) {
		t.Fatalf("stderr %q, want only fencectl's own error (cannot reach etcd at %s)", errOut.String(), addr)
	}
	if out.Len() != 0 {
		t.Fatalf("stdout %q, want nothing", out.String())
	}
}
