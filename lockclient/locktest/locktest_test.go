package locktest_test

import (
	"context"
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
	if c.Running(old) {
		t.Fatal("stopped member still running")
	}
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

func TestBinary_envMissing(t *testing.T) {
	t.Setenv(locktest.EnvBinary, filepath.Join(t.TempDir(), "no-etcd"))
	if _, err := locktest.Binary(t.Context()); err == nil {
		t.Fatalf("Binary with %s naming no file: no error", locktest.EnvBinary)
	}
}
