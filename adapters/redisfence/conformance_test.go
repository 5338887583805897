package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
)

// form is one fenced write form, storing val at key under g.
type form struct {
	name  string
	write func(ctx context.Context, s *redisfence.Store, g fence.Grant, key string, val int64) error
	read  func(t *testing.T, e *env, key string) (int64, bool)
}

func readString(t *testing.T, e *env, key string) (int64, bool) {
	t.Helper()
	v, ok := e.get(t, key)
	var n int64
	if ok {
		fmt.Sscan(v, &n)
	}
	return n, ok
}

func readHash(t *testing.T, e *env, key string) (int64, bool) {
	t.Helper()
	n, err := e.raw.HGet(t.Context(), key, "val").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return n, true
}

// forms are the write forms that store a value; Delete is checked on its own.
var forms = []form{
	{"Set", func(ctx context.Context, s *redisfence.Store, g fence.Grant, key string, val int64) error {
		return s.Set(ctx, g, key, val, 0)
	}, readString},
	{"HSet", func(ctx context.Context, s *redisfence.Store, g fence.Grant, key string, val int64) error {
		return s.HSet(ctx, g, key, map[string]any{"val": val})
	}, readHash},
	{"Exec", func(ctx context.Context, s *redisfence.Store, g fence.Grant, key string, val int64) error {
		return fence.Exec(ctx, s, g, func(tx redis.Pipeliner) error {
			tx.Set(ctx, key, val, 0)
			return nil
		})
	}, readString},
}

// TestStore_oneMark checks that a resource has one mark whatever form each write
// takes: for every ordered pair of forms (first, then), a write by first with
// token 6 on key a makes then's write with token 5 stale, on key a and on key b of
// the same resource, with nothing written, while then's write with token 6 or 7 is
// accepted and 7 becomes the mark.
func TestStore_oneMark(t *testing.T) {
	for _, first := range forms {
		for _, then := range forms {
			t.Run(first.name+"Then"+then.name, func(t *testing.T) {
				e := newEnv(t)
				ctx := t.Context()
				res := e.res("r")
				a, b := e.key(res, "a-"+first.name), e.key(res, "b-"+then.name)
				if err := first.write(ctx, e.store, fence.NewGrant(res, 6), a, 60); err != nil {
					t.Fatalf("%s(6) on a: %v", first.name, err)
				}
				if got := e.mark(t, res); got != 6 {
					t.Fatalf("%s(6) left the mark at %d, want 6", first.name, got)
				}
				for _, k := range []string{a, b} {
					wantStale(t, then.write(ctx, e.store, fence.NewGrant(res, 5), k, 50), res, 5, 6)
				}
				if v, _ := first.read(t, e, a); v != 60 {
					t.Fatalf("a = %d, want 60", v)
				}
				if _, found := then.read(t, e, b); found {
					t.Fatal("a stale write created b")
				}
				if err := then.write(ctx, e.store, fence.NewGrant(res, 6), b, 61); err != nil {
					t.Fatalf("%s(6) on b, the same token: %v", then.name, err)
				}
				if err := then.write(ctx, e.store, fence.NewGrant(res, 7), b, 70); err != nil {
					t.Fatalf("%s(7) on b: %v", then.name, err)
				}
				if v, _ := then.read(t, e, b); v != 70 {
					t.Fatalf("b = %d, want 70", v)
				}
				if got := e.mark(t, res); got != 7 {
					t.Fatalf("%s(7) left the mark at %d, want 7", then.name, got)
				}
				wantStale(t, first.write(ctx, e.store, fence.NewGrant(res, 6), a, 66), res, 6, 7)
				if v, _ := first.read(t, e, a); v != 60 {
					t.Fatalf("a = %d after a stale write, want 60", v)
				}
			})
		}
	}
}

// TestStore_Delete_tombstone checks Delete: the key is gone for plain readers,
// Get reports it deleted with its token, a stale write in any form cannot bring
// it back nor delete another key of the resource, and a newer write does and
// clears the tombstone.
func TestStore_Delete_tombstone(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	k, other := e.key(res, "k"), e.key(res, "other")
	if err := e.store.Set(ctx, fence.NewGrant(res, 3), k, "v3", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Set(ctx, fence.NewGrant(res, 3), other, "o3", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Delete(ctx, fence.NewGrant(res, 8), k); err != nil {
		t.Fatalf("Delete(8): %v", err)
	}
	if _, found := e.get(t, k); found {
		t.Fatal("a plain GET still finds the deleted key")
	}
	_, err := e.store.Get(ctx, fence.NewGrant(res, 8), k)
	if !errors.Is(err, fence.ErrNotFound) || !containsAll(err.Error(), "deleted with token 8") {
		t.Fatalf("Get of a deleted key = %v, want ErrNotFound naming token 8", err)
	}
	for _, f := range forms {
		wantStale(t, f.write(ctx, e.store, fence.NewGrant(res, 7), k, 7), res, 7, 8)
		if _, found := f.read(t, e, k); found {
			t.Fatalf("a stale %s brought the deleted key back", f.name)
		}
	}
	wantStale(t, e.store.Delete(ctx, fence.NewGrant(res, 7), other), res, 7, 8)
	if v, _ := e.get(t, other); v != "o3" {
		t.Fatalf("a stale Delete removed another key: %q", v)
	}
	if err := e.store.Set(ctx, fence.NewGrant(res, 9), k, "v9", 0); err != nil {
		t.Fatal(err)
	}
	if v, err := e.store.Get(ctx, fence.NewGrant(res, 9), k); err != nil || v.Val != "v9" || v.Token != 9 {
		t.Fatalf("Get after a newer write = %+v, %v", v, err)
	}
	if err := e.store.Delete(ctx, fence.NewGrant(res, 9), e.key(res, "never")); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if fields, _ := e.raw.HKeys(ctx, redisfence.MarkKey(res)).Result(); len(fields) != 2 {
		t.Fatalf("mark fields %q, want the token and one tombstone", fields)
	}
}

// TestStore_Get_readModifyWrite checks the read of a read-modify-write: the value
// with the stored token; a newer holder's token makes the read stale; the
// write-back of the older holder is refused once the newer one wrote.
func TestStore_Get_readModifyWrite(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("counter")
	k, h := e.key(res, "n"), e.key(res, "h")
	if _, err := e.store.Get(ctx, fence.NewGrant(res, 1), k); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Get of a missing key = %v", err)
	}
	if err := e.store.Set(ctx, fence.NewGrant(res, 4), k, 10, 0); err != nil {
		t.Fatal(err)
	}
	old := fence.NewGrant(res, 4)
	v, err := e.store.Get(ctx, old, k)
	if err != nil || v.Val != "10" || v.Token != 4 {
		t.Fatalf("Get = %+v, %v; want 10 at token 4", v, err)
	}
	if err := e.store.HSet(ctx, fence.NewGrant(res, 5), h, map[string]any{"x": 1, "y": "two"}); err != nil {
		t.Fatal(err)
	}
	wantStale(t, e.store.Set(ctx, old, k, 11, 0), res, 4, 5)
	_, err = e.store.Get(ctx, old, k)
	wantStale(t, err, res, 4, 5)
	hv, err := e.store.HGetAll(ctx, fence.NewGrant(res, 5), h)
	if err != nil || hv.Token != 5 || hv.Fields["x"] != "1" || hv.Fields["y"] != "two" || len(hv.Fields) != 2 {
		t.Fatalf("HGetAll = %+v, %v", hv, err)
	}
	if _, err := e.store.HGetAll(ctx, fence.NewGrant(res, 5), e.key(res, "none")); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("HGetAll of a missing key = %v", err)
	}
}

// TestStore_Fenced_sets checks grant sets: a fenced transaction raises every
// resource's mark (given in any order); a set whose token is below one
// resource's mark is refused naming it, with nothing written and no mark raised;
// single-key writes refuse a set of several and take a set of one.
func TestStore_Fenced_sets(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	a, b, c := e.res("a"), e.res("b"), e.res("c")
	x := e.key(a, "x")
	write := func(g fence.Grant, val int) error {
		return fence.Exec(ctx, e.store, g, func(tx redis.Pipeliner) error {
			tx.Set(ctx, x, val, 0)
			return nil
		})
	}
	if err := write(setGrant{[]string{b, a}, 10}, 10); err != nil {
		t.Fatalf("set {b,a} token 10: %v", err)
	}
	for _, r := range []string{a, b} {
		if got := e.mark(t, r); got != 10 {
			t.Fatalf("mark of %q = %d, want 10", r, got)
		}
	}
	for _, f := range forms {
		wantStale(t, f.write(ctx, e.store, fence.NewGrant(b, 9), e.key(b, "y"), 9), b, 9, 10)
	}
	if err := write(fence.NewGrant(a, 12), 12); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(setGrant{[]string{c, a}, 11}, 11), a, 11, 12)
	if got := e.mark(t, c); got != 0 {
		t.Fatalf("a refused set raised %q to %d", c, got)
	}
	if v, _ := e.get(t, x); v != "12" {
		t.Fatalf("x = %q, want 12: a refused set wrote", v)
	}
	set := setGrant{[]string{a, c}, 20}
	for name, err := range map[string]error{
		"Set":    e.store.Set(ctx, set, x, 1, 0),
		"HSet":   e.store.HSet(ctx, set, e.key(a, "h"), map[string]any{"f": 1}),
		"Delete": e.store.Delete(ctx, set, x),
	} {
		if !errors.Is(err, fence.ErrInvalidArgument) || !containsAll(err.Error(), "covers 2 resources") {
			t.Fatalf("%s with a set of two = %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := e.store.Set(ctx, setGrant{[]string{c}, 21}, e.key(c, "z"), 21, 0); err != nil {
		t.Fatalf("Set with a set of one: %v", err)
	}
	if got := e.mark(t, c); got != 21 {
		t.Fatalf("mark of %q = %d, want 21", c, got)
	}
}

// TestStore_Set_expiration checks Set's expiry as SET's: a duration sets the key's
// time to live (PX), redis.KeepTTL keeps it, 0 removes it; the mark never expires.
func TestStore_Set_expiration(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	k := e.key(res, "k")
	g := fence.NewGrant(res, 1)
	ttl := func() time.Duration {
		t.Helper()
		d, err := e.raw.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	steps := []struct {
		name     string
		exp      time.Duration
		min, max time.Duration // the TTL wanted after the write; -1: none
	}{
		{"an hour", time.Hour, 59 * time.Minute, time.Hour},
		{"KeepTTL", redis.KeepTTL, 59 * time.Minute, time.Hour},
		{"none", 0, -1, -1},
		{"1500ms", 1500 * time.Millisecond, time.Millisecond, 1500 * time.Millisecond},
	}
	for _, s := range steps {
		if err := e.store.Set(ctx, g, k, s.name, s.exp); err != nil {
			t.Fatalf("Set(%s): %v", s.name, err)
		}
		if d := ttl(); d < s.min || d > s.max {
			t.Fatalf("after Set(%s) the key's TTL is %v, want %v to %v", s.name, d, s.min, s.max)
		}
	}
	if d, err := e.raw.PTTL(ctx, redisfence.MarkKey(res)).Result(); err != nil || d != -1 {
		t.Fatalf("the mark's TTL is %v (%v), want none", d, err)
	}
}
