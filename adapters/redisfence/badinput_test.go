package redisfence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
)

type nilGrant struct{}

func (*nilGrant) Resource() string   { return "x" }
func (*nilGrant) Token() fence.Token { return 1 }

type nilMarshaler struct{}

func (*nilMarshaler) MarshalBinary() ([]byte, error) { return nil, nil }

// TestStore_badInput checks that bad input of every kind, typed nils included, is
// refused with fence.ErrInvalidArgument naming the problem, and a lost lock with
// fence.ErrLost, all before any command is sent.
func TestStore_badInput(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	g := fence.NewGrant(res, 5)
	k := e.key(res, "k")
	lost := newWatched(res, 5)
	lost.lose()
	var typedNil *nilGrant
	var nilStore *redisfence.Store
	noop := func(redis.Pipeliner) error { return nil }
	tests := []struct {
		name string
		err  error
		want error
		msg  string
	}{
		{"nil grant", e.store.Set(ctx, nil, k, "v", 0), fence.ErrInvalidArgument, "nil grant"},
		{"typed nil grant", e.store.Set(ctx, typedNil, k, "v", 0), fence.ErrInvalidArgument, "nil grant"},
		{"zero token", e.store.Set(ctx, fence.NewGrant(res, 0), k, "v", 0), fence.ErrInvalidArgument, "invalid token 0"},
		{"empty resource", e.store.HSet(ctx, fence.NewGrant("", 1), k, map[string]any{"f": 1}), fence.ErrInvalidArgument, "empty resource"},
		{"NUL in resource", e.store.Delete(ctx, fence.NewGrant("a\x00b", 1), k), fence.ErrInvalidArgument, "NUL"},
		{"empty key", e.store.Set(ctx, g, "", "v", 0), fence.ErrInvalidArgument, "empty key"},
		{"reserved key", e.store.Set(ctx, g, redisfence.MarkKey(res), "v", 0), fence.ErrInvalidArgument, "the Store's own"},
		{"nil value", e.store.Set(ctx, g, k, nil, 0), fence.ErrInvalidArgument, "nil value"},
		{"typed nil value", e.store.Set(ctx, g, k, (*nilMarshaler)(nil), 0), fence.ErrInvalidArgument, "nil value"},
		{"struct value", e.store.Set(ctx, g, k, struct{}{}, 0), fence.ErrInvalidArgument, "value of type struct"},
		{"negative expiry", e.store.Set(ctx, g, k, "v", -time.Second), fence.ErrInvalidArgument, "expiration"},
		{"sub-ms expiry", e.store.Set(ctx, g, k, "v", time.Microsecond), fence.ErrInvalidArgument, "expiration"},
		{"no fields", e.store.HSet(ctx, g, k, nil), fence.ErrInvalidArgument, "no fields"},
		{"nil field value", e.store.HSet(ctx, g, k, map[string]any{"f": nil}), fence.ErrInvalidArgument, `field "f"`},
		{"lost Set", e.store.Set(ctx, lost, k, "v", 0), fence.ErrLost, res},
		{"lost HSet", e.store.HSet(ctx, lost, k, map[string]any{"f": 1}), fence.ErrLost, res},
		{"lost Delete", e.store.Delete(ctx, lost, k), fence.ErrLost, res},
		{"lost Fenced", e.store.Fenced(ctx, lost, noop), fence.ErrLost, res},
		{"lost Get", errOf(e.store.Get(ctx, lost, k)), fence.ErrLost, res},
		{"lost Exec", fence.Exec(ctx, e.store, lost, noop), fence.ErrLost, res},
		{"nil fn", e.store.Fenced(ctx, g, nil), fence.ErrInvalidArgument, "nil function"},
		{"nil Store", nilStore.Set(ctx, g, k, "v", 0), fence.ErrInvalidArgument, "nil Store"},
		{"nil Store Fenced", nilStore.Fenced(ctx, g, noop), fence.ErrInvalidArgument, "nil Store"},
		{"nil Store Exec", fence.Exec(ctx, nilStore, g, noop), fence.ErrInvalidArgument, "nil store"},
		{"nil Store Get", errOf(nilStore.Get(ctx, g, k)), fence.ErrInvalidArgument, "nil Store"},
		{"MULTI in a transaction", e.store.Fenced(ctx, g, func(tx redis.Pipeliner) error {
			tx.Do(ctx, "multi")
			return nil
		}), fence.ErrInvalidArgument, "multi cannot run"},
		{"reserved key in a transaction", e.store.Fenced(ctx, g, func(tx redis.Pipeliner) error {
			tx.Del(ctx, k, redisfence.MarkKey(res))
			return nil
		}), fence.ErrInvalidArgument, "the Store's own"},
		{"unfillable reply", e.store.Fenced(ctx, g, func(tx redis.Pipeliner) error {
			tx.ZRangeWithScores(ctx, k, 0, -1)
			return nil
		}), fence.ErrInvalidArgument, "cannot fill a *redis.ZSliceCmd"},
		{"set of two for Get", errOf(e.store.Get(ctx, setGrant{[]string{res, "other"}, 5}, k)), fence.ErrInvalidArgument, "covers 2 resources"},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) || !strings.Contains(tt.err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %v saying %q", tt.name, tt.err, tt.want, tt.msg)
		}
	}
	if n := e.sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for refused input", n)
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestNew_badInput checks the constructor's refusals.
func TestNew_badInput(t *testing.T) {
	var typed *redis.Client
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { ring.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { rdb.Close() })
	tests := []struct {
		name string
		rdb  redis.UniversalClient
		opt  redisfence.Option
		msg  string
	}{
		{"nil client", nil, nil, "nil Redis client"},
		{"typed nil client", typed, nil, "nil Redis client"},
		{"zero replicas", rdb, redisfence.WithWaitReplicas(0, time.Second), "1 to 100 replicas"},
		{"no timeout", rdb, redisfence.WithWaitReplicas(1, 0), "timeout of 1ms"},
		{"WAIT on a Ring", ring, redisfence.WithWaitReplicas(1, time.Second), "*redis.Ring"},
	}
	for _, tt := range tests {
		s, err := redisfence.New(tt.rdb, tt.opt)
		if s != nil || !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: New = %v, %v; want ErrInvalidArgument saying %q", tt.name, s, err, tt.msg)
		}
	}
	if s, err := redisfence.New(rdb, nil, redisfence.WithObserver(nil)); s == nil || err != nil {
		t.Fatalf("New with a nil option and observer = %v, %v", s, err)
	}
}

// TestStore_badMark checks that a mark holding something the Store did not write
// refuses writes and reads, leaving the data as it was.
func TestStore_badMark(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res, wrongType := e.res("garbled"), e.res("string")
	k := e.key(res, "k")
	if err := e.raw.HSet(ctx, redisfence.MarkKey(res), "token", "12abc").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.Set(ctx, redisfence.MarkKey(wrongType), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(ctx, fence.NewGrant(res, 99), k); !errors.Is(err, redisfence.ErrBadMark) {
		t.Fatalf("Get under a garbled mark = %v, want ErrBadMark", err)
	}
	err := e.store.Set(ctx, fence.NewGrant(wrongType, 1), e.key(wrongType, "k"), "v", 0)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || errors.Is(err, fence.ErrCommitUnknown) {
		t.Fatalf("Set under a mark of the wrong type = %v, want WRONGTYPE", err)
	}
	if _, found := e.get(t, e.key(wrongType, "k")); found {
		t.Fatal("a write under a mark of the wrong type wrote")
	}
}
