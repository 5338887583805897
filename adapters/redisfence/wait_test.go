package redisfence_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/fence"
)

// TestWithWaitReplicas checks WAIT after every write, in the same round trip: with
// no replica a write stands on the primary and returns ErrNotReplicated (0 of 1);
// with a real replica attached (a second redis-server, REPLICAOF the node) every
// form is acknowledged and the replica holds data and mark; a stale write is
// refused as ever.
func TestWithWaitReplicas(t *testing.T) {
	if os.Getenv(redistest.EnvURL) != "" {
		t.Skip("needs a primary of its own to attach a replica to")
	}
	primary, err := redistest.StartNode(t.Context())
	if err != nil {
		node.Options(t) // skips (or fails where CI is set) when there is no server at all
		t.Fatal(err)
	}
	t.Cleanup(func() { primary.Close() })
	raw := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { raw.Close() })
	e := envOn(t, raw, redis.NewClient(&redis.Options{Addr: primary.Addr}), redisfence.WithWaitReplicas(1, 200*time.Millisecond))
	ctx := t.Context()
	res := e.res("r")
	k := e.key(res, "k")

	err = e.store.Set(ctx, fence.NewGrant(res, 2), k, "alone", 0)
	if !errors.Is(err, redisfence.ErrNotReplicated) || !errors.Is(err, fence.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1") {
		t.Fatalf("Set with no replica = %v, want ErrNotReplicated, 0 of 1", err)
	}
	if v, _ := e.get(t, k); v != "alone" || e.mark(t, res) != 2 {
		t.Fatalf("the write did not stand on the primary: %q, mark %d", v, e.mark(t, res))
	}

	replica, err := redistest.StartNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Close() })
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { rr.Close() })
	host, port, _ := net.SplitHostPort(primary.Addr)
	if err := rr.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitOnline(t, raw)
	// WAIT returns as soon as the replica acknowledges: a long timeout costs
	// nothing here, and a loaded machine's replica may take over 200 ms.
	sc := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { sc.Close() })
	if e.store, err = redisfence.New(sc, redisfence.WithWaitReplicas(1, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	writes := []struct {
		name  string
		write func() error
	}{
		{"Set", func() error { return e.store.Set(ctx, fence.NewGrant(res, 3), k, "replicated", 0) }},
		{"HSet", func() error {
			return e.store.HSet(ctx, fence.NewGrant(res, 4), e.key(res, "h"), map[string]any{"f": 4})
		}},
		{"Fenced", func() error {
			return e.store.Fenced(ctx, fence.NewGrant(res, 5), func(tx redis.Pipeliner) error {
				tx.Incr(ctx, e.key(res, "n"))
				return nil
			})
		}},
		{"Delete", func() error { return e.store.Delete(ctx, fence.NewGrant(res, 6), e.key(res, "h")) }},
	}
	for _, w := range writes {
		if err := w.write(); err != nil {
			t.Fatalf("%s with a replica: %v", w.name, err)
		}
	}
	wantStale(t, e.store.Set(ctx, fence.NewGrant(res, 1), k, "stale", 0), res, 1, 6)
	// Acknowledged means on the replica already: read it there, without waiting.
	if v, err := rr.Get(ctx, k).Result(); err != nil || v != "replicated" {
		t.Fatalf("replica has %q, %v", v, err)
	}
	if m, err := rr.HGet(ctx, redisfence.MarkKey(res), "token").Result(); err != nil || m != "6" {
		t.Fatalf("replica's mark %q, %v; want 6", m, err)
	}
}

// waitOnline waits until the primary counts a replica as online: the replica has
// loaded the primary's data and acknowledges its writes, so WAIT counts it.
func waitOnline(t *testing.T, primary *redis.Client) {
	t.Helper()
	for {
		info, err := primary.Info(t.Context(), "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "state=online") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWithWaitReplicas_staleDoesNotWait checks that a write refused as stale
// sends no WAIT, in every form, on a primary with no replica (where WAIT would
// last its whole timeout): the server's command statistics count the one WAIT
// of the accepted write only.
func TestWithWaitReplicas_staleDoesNotWait(t *testing.T) {
	raw := ownNode(t)
	ctx := t.Context()
	e := envOn(t, raw, redis.NewClient(&redis.Options{Addr: raw.Options().Addr}), redisfence.WithWaitReplicas(1, 100*time.Millisecond))
	res := e.res("r")
	k := e.key(res, "k")
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Set(ctx, fence.NewGrant(res, 2), k, "two", 0); !errors.Is(err, redisfence.ErrNotReplicated) {
		t.Fatalf("accepted Set with no replica = %v, want ErrNotReplicated", err)
	}
	stale := fence.NewGrant(res, 1)
	for _, err := range []error{
		e.store.Set(ctx, stale, k, "one", 0),
		e.store.HSet(ctx, stale, e.key(res, "h"), map[string]any{"f": 1}),
		e.store.Delete(ctx, stale, k),
		e.store.Fenced(ctx, stale, func(tx redis.Pipeliner) error {
			tx.Incr(ctx, e.key(res, "n"))
			return nil
		}),
	} {
		wantStale(t, err, res, 1, 2)
	}
	if n := commandStats(t, raw)["wait"]; n != 1 {
		t.Fatalf("WAIT sent %d times, want once: for the accepted write only", n)
	}
}
