package locktest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestStart_putGet(t *testing.T) {
	s := locktest.Start(t)
	if eps := s.Endpoints(); len(eps) != 1 {
		t.Fatalf("Start: endpoints %v; want one member", eps)
	}
	cli := s.Client(t)
	if _, err := cli.Put(t.Context(), "k", "v"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	resp, err := cli.Get(t.Context(), "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v", resp, err)
	}
}

func TestCluster_stopRestartLeader(t *testing.T) {
	c := locktest.StartCluster(t, 3)
	cli := c.Client(t)
	if _, err := cli.Put(t.Context(), "before", "1"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	old := c.WaitLeader(t)
	c.Stop(old)
	if nl := c.WaitLeader(t); nl == old {
		t.Fatalf("leader %d after stopping it", nl)
	}
	if _, err := cli.Put(t.Context(), "during", "2"); err != nil {
		t.Fatalf("Put with a member down: %v", err)
	}
	c.Restart(old)
	// The restarted member must have the write made while it was down.
	mc := c.MemberClient(t, old)
	resp, err := mc.Get(t.Context(), "during")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("restarted member Get = %v, %v", resp, err)
	}
}

func TestStartTLS_refusesPlain(t *testing.T) {
	certs := locktest.NewCerts(t)
	s := locktest.StartTLS(t, certs)
	for _, ep := range s.Endpoints() {
		if !strings.HasPrefix(ep, "https://") {
			t.Fatalf("endpoint %q: want https", ep)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), TLS: certs.ClientTLS(t), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if _, err := cli.Put(t.Context(), "k", "v"); err != nil {
		t.Fatalf("Put over TLS: %v", err)
	}
	// A client without the client certificate must be refused.
	plain := s.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := plain.Get(ctx, "k"); err == nil {
		t.Fatal("Get without TLS succeeded")
	}
}

func TestRun_envMissing(t *testing.T) {
	t.Setenv("FENCEGATE_ETCD", filepath.Join(t.TempDir(), "no-etcd"))
	c, err := locktest.Run(t.TempDir())
	if err == nil {
		c.Close()
		t.Fatal("Run with FENCEGATE_ETCD naming no file: no error")
	}
	if !strings.Contains(err.Error(), "FENCEGATE_ETCD") {
		t.Fatalf("Run with FENCEGATE_ETCD naming no file: %v; want the variable named", err)
	}
}

// TestStart_failureShowsStderr runs this test binary again with an "etcd" that
// writes to stderr and exits: the start failure must say so.
func TestStart_failureShowsStderr(t *testing.T) {
	if os.Getenv("LOCKTEST_CHILD") == "1" {
		locktest.Start(t)
		return
	}
	fake := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'member broke: disk on fire' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestStart_failureShowsStderr$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "LOCKTEST_CHILD=1", "FENCEGATE_ETCD="+fake)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("Start with a failing member passed:\n%s", out)
	}
	if !strings.Contains(string(out), "disk on fire") {
		t.Fatalf("start failure does not show the member's stderr:\n%s", out)
	}
}

// TestStartConfig_leaseTTL: a member started for a test grants a lease of 1 s
// as asked; with etcd's default timing (election timeout 1 s) it raises it to
// 2 s, 1.5 x the election timeout rounded up.
func TestStartConfig_leaseTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  locktest.Config
		want int64
	}{
		{"test timing", locktest.Config{}, 1},
		{"etcd's defaults", locktest.Config{Heartbeat: 100 * time.Millisecond, ElectionTimeout: time.Second}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := locktest.StartConfig(t, tc.cfg).Client(t)
			resp, err := cli.Grant(t.Context(), 1)
			if err != nil || resp.TTL != tc.want {
				t.Fatalf("Grant(1 s) = %+v, %v; want a TTL of %d s", resp, err, tc.want)
			}
		})
	}
}

// TestShared_keySpaces: tests that share a member each see only their own
// keys, kept under their Prefix on the one member.
func TestShared_keySpaces(t *testing.T) {
	s := locktest.NewShared()
	t.Cleanup(func() { s.Close() })
	a, b := s.Cluster(t), s.Cluster(t)
	if a.Prefix() == b.Prefix() || a.Prefix() == "" || a.Endpoints()[0] != b.Endpoints()[0] {
		t.Fatalf("prefixes %q and %q on %v and %v: want two on one member", a.Prefix(), b.Prefix(), a.Endpoints(), b.Endpoints())
	}
	if _, err := a.Client(t).Put(t.Context(), "k", "a"); err != nil {
		t.Fatal(err)
	}
	if resp, err := b.Client(t).Get(t.Context(), "k"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("another test's Get(k) = %v, %v; want nothing", resp, err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: a.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	resp, err := raw.Get(t.Context(), a.Prefix()+"k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "a" {
		t.Fatalf("Get(%sk) on the member = %v, %v; want a", a.Prefix(), resp, err)
	}
}
