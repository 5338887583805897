package redistest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
)

var (
	node    redistest.Node
	cluster redistest.Cluster
)

func TestMain(m *testing.M) {
	code := m.Run()
	node.Close()
	cluster.Close()
	os.Exit(code)
}

// TestNode_restartKeepsWrites checks what the adapter's durability claim rests
// on: with appendfsync always, a write acknowledged before the server is killed
// (SIGKILL, no shutdown save) is there after it starts again from its AOF.
func TestNode_restartKeepsWrites(t *testing.T) {
	rdb := node.Client(t)
	if os.Getenv(redistest.EnvURL) != "" {
		t.Skip("a server named by " + redistest.EnvURL + " is not restarted")
	}
	ctx := t.Context()
	if v, err := rdb.ConfigGet(ctx, "appendfsync").Result(); err != nil || v["appendfsync"] != "always" {
		t.Fatalf("appendfsync = %v (%v), want always", v, err)
	}
	if err := rdb.Set(ctx, "redistest-k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "redistest-k").Result(); err != nil || v != "v1" {
		t.Fatalf("after a crash and restart: %q, %v; want v1", v, err)
	}
}

// TestCluster_slots checks the cluster has every slot served by three masters and
// refuses a command across two slots.
func TestCluster_slots(t *testing.T) {
	rdb := cluster.Client(t)
	ctx := t.Context()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	covered := 0
	for _, s := range shards {
		for _, r := range s.Slots {
			covered += int(r.End-r.Start) + 1
		}
	}
	if len(shards) != 3 || covered != 16384 {
		t.Fatalf("%d shards covering %d slots, want 3 covering 16384", len(shards), covered)
	}
	if err := rdb.MSet(ctx, "{a}x", 1, "{a}y", 2).Err(); err != nil {
		t.Fatalf("MSET in one slot: %v", err)
	}
	// The cluster client splits a cross-slot MSET itself; a raw script call is
	// refused by the server.
	err = rdb.Eval(ctx, "return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)", []string{"{a}x", "{b}x"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("EVAL across two slots = %v, want CROSSSLOT", err)
	}
}
