package redisfence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
)

// TestStore_Fenced_replies checks that the commands fn queued get their replies,
// that a command failing at run time does not undo the others (as in EXEC) and is
// returned, and that fn's error or a lost grant sends nothing.
func TestStore_Fenced_replies(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	k, n, h, l := e.key(res, "k"), e.key(res, "n"), e.key(res, "h"), e.key(res, "l")
	var (
		set    *redis.StatusCmd
		incr   *redis.IntCmd
		get    *redis.StringCmd
		miss   *redis.StringCmd
		nx     *redis.BoolCmd
		hall   *redis.MapStringStringCmd
		rng    *redis.StringSliceCmd
		fl     *redis.FloatCmd
		do     *redis.Cmd
		exists *redis.IntCmd
	)
	err := e.store.Fenced(ctx, fence.NewGrant(res, 3), func(tx redis.Pipeliner) error {
		set = tx.Set(ctx, k, "v", 0)
		incr = tx.IncrBy(ctx, n, 5)
		get = tx.Get(ctx, k)
		miss = tx.Get(ctx, e.key(res, "missing"))
		nx = tx.SetNX(ctx, k, "w", 0)
		tx.HSet(ctx, h, "f", "1", "g", "2")
		hall = tx.HGetAll(ctx, h)
		tx.RPush(ctx, l, "a", "b")
		rng = tx.LRange(ctx, l, 0, -1)
		fl = tx.IncrByFloat(ctx, e.key(res, "f"), 1.5)
		do = tx.Do(ctx, "incr", n)
		exists = tx.Exists(ctx, k, n, e.key(res, "missing"))
		return nil
	})
	if err != nil {
		t.Fatalf("Fenced: %v", err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"set", set.Val() == "OK"},
		{"incr", incr.Val() == 5},
		{"get", get.Val() == "v"},
		{"missing", errors.Is(miss.Err(), redis.Nil)},
		{"setnx", nx.Err() == nil && !nx.Val()},
		{"hgetall", hall.Val()["f"] == "1" && hall.Val()["g"] == "2"},
		{"lrange", fmt.Sprint(rng.Val()) == "[a b]"},
		{"incrbyfloat", fl.Val() == 1.5},
		{"do", fmt.Sprint(do.Val()) == "6"},
		{"exists", exists.Val() == 2},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("reply of %s not filled as Redis answered", c.name)
		}
	}

	var after *redis.IntCmd
	err = e.store.Fenced(ctx, fence.NewGrant(res, 4), func(tx redis.Pipeliner) error {
		tx.HSet(ctx, k, "f", 1) // k holds a string: WRONGTYPE
		after = tx.Incr(ctx, n)
		return nil
	})
	if err == nil || !containsAll(err.Error(), "WRONGTYPE", "command 1 (hset)") {
		t.Fatalf("Fenced with a failing command = %v, want its WRONGTYPE", err)
	}
	if after.Val() != 7 || e.mark(t, res) != 4 {
		t.Fatalf("the command after a failing one: %d, mark %d; want 7 and 4, as EXEC runs them", after.Val(), e.mark(t, res))
	}

	sentBefore := e.sent.n.Load()
	boom := errors.New("boom")
	if err := e.store.Fenced(ctx, fence.NewGrant(res, 5), func(tx redis.Pipeliner) error {
		tx.Set(ctx, k, "boom", 0)
		return boom
	}); err != boom {
		t.Fatalf("Fenced with fn failing = %v, want fn's error", err)
	}
	w := newWatched(res, 5)
	if err := e.store.Fenced(ctx, w, func(tx redis.Pipeliner) error {
		tx.Set(ctx, k, "lost", 0)
		w.lose()
		return nil
	}); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Fenced with the lock lost during fn = %v, want ErrLost", err)
	}
	if err := e.store.Fenced(ctx, fence.NewGrant(res, 5), func(tx redis.Pipeliner) error {
		tx.Set(ctx, k, "sent", 0)
		_, err := tx.Exec(ctx)
		return err
	}); err == nil || !containsAll(err.Error(), "do not call Exec") {
		t.Fatalf("Exec inside fn = %v", err)
	}
	if n := e.sent.n.Load() - sentBefore; n != 0 {
		t.Fatalf("%d commands sent for transactions that must send none", n)
	}
	if v, _ := e.get(t, k); v != "v" || e.mark(t, res) != 4 {
		t.Fatalf("k = %q, mark %d: a transaction that was not sent wrote", v, e.mark(t, res))
	}
}
