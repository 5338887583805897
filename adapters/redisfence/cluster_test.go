package redisfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
)

// TestSlot checks Slot against the server's CLUSTER KEYSLOT, and that a resource's
// mark and its tagged keys share a slot, for resources with and without a hash tag
// of their own.
func TestSlot(t *testing.T) {
	rdb := cluster.Client(t)
	for _, key := range []string{"", "a", "job-7", "{job-7}:progress", "fencegate:{job-7}", "{}x", "a}b", "{a}{b}", "héllo", "123456789"} {
		want, err := rdb.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redisfence.Slot(key); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", key, got, want)
		}
	}
	for _, tt := range []struct{ resource, key string }{
		{"job-7", "{job-7}:progress"},
		{"{order-7}:invoice", "{order-7}:stock"},
	} {
		if redisfence.Slot(redisfence.MarkKey(tt.resource)) != redisfence.Slot(tt.key) {
			t.Errorf("mark of %q (%s) and key %q in different slots", tt.resource, redisfence.MarkKey(tt.resource), tt.key)
		}
	}
}

// TestStore_cluster checks the slot rules on a three-master Cluster: every write
// form works on keys tagged with the resource, whatever master serves it; a key in
// another slot is refused before any I/O in every form; a set of resources sharing
// a hash tag is fenced in one transaction, one without a common slot is refused.
func TestStore_cluster(t *testing.T) {
	e := newClusterEnv(t)
	ctx := t.Context()
	masters := map[string]bool{}
	for i := range 12 {
		res := e.res(string(rune('a' + i)))
		k := e.key(res, "v")
		g := fence.NewGrant(res, 2)
		if err := e.store.Set(ctx, g, k, "two", 0); err != nil {
			t.Fatalf("Set on %q: %v", res, err)
		}
		if err := e.store.HSet(ctx, g, e.key(res, "h"), map[string]any{"f": 2}); err != nil {
			t.Fatalf("HSet on %q: %v", res, err)
		}
		var incr *redis.IntCmd
		if err := fence.Exec(ctx, e.store, g, func(tx redis.Pipeliner) error {
			tx.MSet(ctx, e.key(res, "x"), 1, e.key(res, "y"), 2)
			incr = tx.Incr(ctx, e.key(res, "n"))
			return nil
		}); err != nil || incr.Val() != 1 {
			t.Fatalf("Exec on %q: %v (incr %d)", res, err, incr.Val())
		}
		wantStale(t, e.store.Set(ctx, fence.NewGrant(res, 1), k, "one", 0), res, 1, 2)
		if err := e.store.Delete(ctx, fence.NewGrant(res, 3), k); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Get(ctx, fence.NewGrant(res, 3), k); !errors.Is(err, fence.ErrNotFound) {
			t.Fatalf("Get after Delete = %v", err)
		}
		m, err := e.raw.(*redis.ClusterClient).MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("12 resources landed on %d master(s); the test wants several", len(masters))
	}

	res := e.res("r")
	g := fence.NewGrant(res, 5)
	other := "{" + e.res("elsewhere") + "}:k"
	sent := e.sent.n.Load()
	for name, err := range map[string]error{
		"Set":    e.store.Set(ctx, g, other, "v", 0),
		"HSet":   e.store.HSet(ctx, g, other, map[string]any{"f": 1}),
		"Delete": e.store.Delete(ctx, g, other),
		"Get":    errOf(e.store.Get(ctx, g, other)),
		"Fenced": e.store.Fenced(ctx, g, func(tx redis.Pipeliner) error {
			tx.Set(ctx, e.key(res, "ok"), 1, 0)
			tx.Del(ctx, e.key(res, "ok"), other)
			return nil
		}),
		"set without a common slot": e.store.Fenced(ctx, setGrant{[]string{res, e.res("s")}, 5}, func(redis.Pipeliner) error { return nil }),
	} {
		if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "slot") {
			t.Errorf("%s across slots = %v, want ErrInvalidArgument naming the slots", name, err)
		}
	}
	if n := e.sent.n.Load() - sent; n != 0 {
		t.Fatalf("%d commands sent for cross-slot writes", n)
	}
	if e.mark(t, res) != 0 {
		t.Fatal("a refused cross-slot write raised the mark")
	}

	tag := "{" + e.ns + "-order}"
	inv, stock := tag+":invoice", tag+":stock"
	if err := e.store.Fenced(ctx, setGrant{[]string{stock, inv}, 9}, func(tx redis.Pipeliner) error {
		tx.Set(ctx, tag+":total", 100, 0)
		tx.DecrBy(ctx, tag+":left", 1)
		return nil
	}); err != nil {
		t.Fatalf("set sharing a hash tag: %v", err)
	}
	if e.mark(t, inv) != 9 || e.mark(t, stock) != 9 {
		t.Fatalf("marks %d and %d, want 9 and 9", e.mark(t, inv), e.mark(t, stock))
	}
	wantStale(t, e.store.Set(ctx, fence.NewGrant(stock, 8), tag+":total", 1, 0), stock, 8, 9)
}
