package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRun_exec_unreachable: against an etcd that cannot be reached, exec
// exits 1 and says so, with -try and without it, running nothing.
func TestRun_exec_unreachable(t *testing.T) {
	addr := closedPort(t)
	for _, tt := range []struct {
		name  string
		flags []string
	}{
		{"waiting", nil},
		{"try", []string{"-try"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-endpoints", addr, "-timeout", "1s", "exec"}, tt.flags...)
			args = append(args, "job", "--", "sh", "-c", "echo ran")
			var out, errOut syncBuffer
			code := waitStatus(t, fencectlAsync(t.Context(), &out, &errOut, args...), &errOut)
			if code != 1 || !strings.Contains(errOut.String(), "cannot reach etcd at "+addr) || out.String() != "" {
				t.Fatalf("status %d, stdout %q, stderr %q; want 1, nothing run, cannot reach etcd", code, out.String(), errOut.String())
			}
		})
	}
}

// TestRun_exec_etcdGoneWhileWaiting: exec waiting for a held lock exits 1
// when etcd stops answering, rather than wait on.
func TestRun_exec_etcdGoneWhileWaiting(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	cli := srv.Client(t)
	lc, err := lockclient.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	if _, err := lc.Acquire(t.Context(), "job"); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	res := fencectlAsync(t.Context(), &out, &errOut, "-endpoints", eps, "-timeout", "1s", "exec", "job", "--", "sh", "-c", "echo ran")
	waitSessions(t, cli, 2)
	srv.Stop(0)
	code := waitStatus(t, res, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "cannot reach etcd") || out.String() != "" {
		t.Fatalf("status %d, stdout %q, stderr %q; want 1, nothing run, cannot reach etcd", code, out.String(), errOut.String())
	}
	srv.Restart(0) // lc.Close's revoke then answers at once
}

// waitSessions waits until etcd keeps n leases: a waiting exec writes nothing
// but its session lease, the sign it reached etcd.
func waitSessions(t *testing.T, cli *clientv3.Client, n int) {
	t.Helper()
	for ; ; time.Sleep(10 * time.Millisecond) {
		resp, err := cli.Leases(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Leases) >= n {
			return
		}
	}
}

// TestRun_exec_releasedNotExpired: a command that exits cleanly is watched as
// released, every time (the session is not revoked as the lock is released).
func TestRun_exec_releasedNotExpired(t *testing.T) {
	srv := locktest.Start(t)
	eps := strings.Join(srv.Endpoints(), ",")
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events, err := lc.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if code, _, errOut := fencectl(t, "-endpoints", eps, "exec", "job", "--", "true"); code != 0 {
			t.Fatalf("run %d: status %d; stderr %q", i, code, errOut)
		}
		for ev := range events {
			if ev.Type == lockclient.EventExpired {
				t.Fatalf("run %d: the clean exit was watched as %v", i, ev)
			}
			if ev.Type == lockclient.EventReleased {
				break
			}
		}
	}
}
