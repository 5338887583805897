package locktest_test

import (
	"testing"

	"github.com/fencegate/fencegate/lockclient/locktest"
)

func TestStart(t *testing.T) {
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
