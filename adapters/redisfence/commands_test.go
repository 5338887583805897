package redisfence_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
)

// TestStore_Fenced_storeIntoMark replays issue 33: SORT ... STORE and GEORADIUS
// ... STORE aimed at the resource's mark inside a fenced transaction. Both are
// refused, nothing is written, the mark stays, and a stale Set is refused after;
// the same commands storing into a data key run, their keys asked of the server
// (COMMAND GETKEYS) in one round trip.
func TestStore_Fenced_storeIntoMark(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	mark, src, geo := redisfence.MarkKey(res), e.key(res, "src"), e.key(res, "geo")
	if err := e.store.Set(ctx, fence.NewGrant(res, 10), e.key(res, "v"), "ten", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.RPush(ctx, src, 3, 1, 2).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.GeoAdd(ctx, geo, &redis.GeoLocation{Name: "a", Longitude: 13.4, Latitude: 52.5}).Err(); err != nil {
		t.Fatal(err)
	}
	sent := e.sent.n.Load()
	for name, fn := range map[string]func(tx redis.Pipeliner) error{
		"SORT STORE": func(tx redis.Pipeliner) error {
			tx.Set(ctx, e.key(res, "first"), 1, 0)
			tx.SortStore(ctx, src, mark, &redis.Sort{})
			return nil
		},
		"GEORADIUS STORE": func(tx redis.Pipeliner) error {
			tx.GeoRadiusStore(ctx, geo, 13.4, 52.5, &redis.GeoRadiusQuery{Radius: 10, Unit: "km", Store: mark})
			return nil
		},
	} {
		err := e.store.Fenced(ctx, fence.NewGrant(res, 10), fn)
		if !errors.Is(err, fence.ErrInvalidArgument) || !containsAll(err.Error(), "the Store's own", mark) {
			t.Fatalf("%s into the mark = %v, want ErrInvalidArgument naming the mark", name, err)
		}
	}
	if n := e.sent.n.Load() - sent; n != 0 {
		t.Fatalf("%d commands sent for refused transactions", n)
	}
	if _, found := e.get(t, e.key(res, "first")); found || e.mark(t, res) != 10 {
		t.Fatalf("a refused transaction wrote, or the mark is %d, not 10", e.mark(t, res))
	}
	wantStale(t, e.store.Set(ctx, fence.NewGrant(res, 5), e.key(res, "v"), "stale", 0), res, 5, 10)

	table, pipes := e.sent.table.Load(), e.sent.pipelines.Load()
	var sorted, near *redis.IntCmd
	err := e.store.Fenced(ctx, fence.NewGrant(res, 11), func(tx redis.Pipeliner) error {
		sorted = tx.SortStore(ctx, src, e.key(res, "sorted"), &redis.Sort{})
		near = tx.GeoRadiusStore(ctx, geo, 13.4, 52.5, &redis.GeoRadiusQuery{Radius: 10, Unit: "km", Store: e.key(res, "near")})
		return nil
	})
	if err != nil || sorted.Val() != 3 || near.Val() != 1 {
		t.Fatalf("SORT and GEORADIUS storing into data keys: %v (%d, %d)", err, sorted.Val(), near.Val())
	}
	if got, _ := e.raw.LRange(ctx, e.key(res, "sorted"), 0, -1).Result(); strings.Join(got, ",") != "1,2,3" {
		t.Fatalf("sorted = %v", got)
	}
	if n, p := e.sent.table.Load()-table, e.sent.pipelines.Load()-pipes; n != 2 || p != 1 {
		t.Fatalf("%d COMMAND GETKEYS in %d pipelines, want 2 in 1", n, p)
	}
	if e.mark(t, res) != 11 {
		t.Fatalf("mark %d, want 11", e.mark(t, res))
	}
}

// TestStore_Fenced_refusedCommands checks that commands a fenced transaction
// cannot run safely are refused with fence.ErrInvalidArgument naming the command
// and why, with no command sent but the server's command table (COMMAND) and
// keys (COMMAND GETKEYS), and nothing written.
func TestStore_Fenced_refusedCommands(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	k, mark := e.key(res, "k"), redisfence.MarkKey(res)
	tests := []struct {
		args []any
		msg  string
	}{
		{[]any{"flushall"}, "flushall cannot run in a fenced transaction: it writes without naming a key"},
		{[]any{"FLUSHDB", "ASYNC"}, "flushdb cannot run in a fenced transaction: it writes without naming a key"},
		{[]any{"swapdb", 0, 1}, "swapdb cannot run in a fenced transaction: it reaches another database"},
		{[]any{"select", 1}, "select cannot run in a fenced transaction: it reaches another database"},
		{[]any{"move", k, 1}, "move cannot run in a fenced transaction: it moves a key to another database"},
		{[]any{"migrate", "127.0.0.1", 1, k, 0, 1}, "migrate cannot run in a fenced transaction: it moves keys to another server"},
		{[]any{"copy", k, e.key(res, "c"), "DB", 1}, "copy ... db cannot run"},
		{[]any{"copy", k, e.key(res, "c"), "replace", []byte("db"), 1}, "copy ... db cannot run"},
		{[]any{"xgroup", []byte("CREATE"), mark, "g", "$"}, "the Store's own"},
		{[]any{"multi"}, "multi cannot run in a fenced transaction: Redis refuses it in a script"},
		{[]any{"eval", "return 1", 0}, "eval cannot run in a fenced transaction: Redis refuses it in a script"},
		{[]any{"blpop", k, 1}, "blpop cannot run in a fenced transaction"},
		{[]any{"xread", "streams", k, 0}, "xread cannot run in a fenced transaction: it may block"},
		{[]any{"slowlog", "reset"}, "slowlog|reset cannot run in a fenced transaction: it is an administrative command"},
		{[]any{"config", "set", "maxmemory", 1}, "config|set cannot run"},
		{[]any{"nosuchcommand", k}, "nosuchcommand is not a command this server knows"},
		{[]any{"xgroup", "nosuch", k}, "xgroup nosuch is not a subcommand this server knows"},
		{[]any{"get"}, "get: wrong number of arguments: 1 with its name, Redis wants 2"},
		{[]any{"set", k}, "set: wrong number of arguments: 2 with its name, Redis wants at least 3"},
		{[]any{"del", k, mark}, "the Store's own"},
		{[]any{"rename", k, mark}, "the Store's own"},
		{[]any{"zunionstore", mark, 1, k}, "the Store's own"},
		{[]any{"sort", k, "STORE", mark}, "the Store's own"},
		{[]any{"zunionstore", k, 2, k}, "the server cannot tell its keys"},
	}
	for _, tt := range tests {
		err := e.store.Fenced(ctx, fence.NewGrant(res, 3), func(tx redis.Pipeliner) error {
			tx.Set(ctx, k, "before", 0)
			tx.Do(ctx, tt.args...)
			return nil
		})
		if !errors.Is(err, fence.ErrInvalidArgument) || !containsAll(err.Error(), "command 2", tt.msg) {
			t.Errorf("%v: Fenced = %v, want ErrInvalidArgument saying %q", tt.args, err, tt.msg)
		}
	}
	if n := e.sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for refused transactions", n)
	}
	if _, found := e.get(t, k); found || e.mark(t, res) != 0 {
		t.Fatal("a refused transaction wrote")
	}
}

// TestStore_Fenced_crossSlotStore checks on a Cluster that a command storing
// into a key of another slot (SORT ... STORE, GEORADIUS ... STORE, whose keys the
// Store asks of the server) is refused before the script is sent: the commands
// before it do not land and the mark is not raised.
func TestStore_Fenced_crossSlotStore(t *testing.T) {
	e := newClusterEnv(t)
	ctx := t.Context()
	res := e.res("r")
	src, other := e.key(res, "src"), "{"+e.res("elsewhere")+"}:dst"
	if redisfence.Slot(src) == redisfence.Slot(other) {
		t.Fatal("the test's keys share a slot")
	}
	if err := e.raw.RPush(ctx, src, 1).Err(); err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func(tx redis.Pipeliner) error{
		"SORT STORE": func(tx redis.Pipeliner) error {
			tx.Set(ctx, e.key(res, "first"), 1, 0)
			tx.SortStore(ctx, src, other, &redis.Sort{})
			return nil
		},
		"GEORADIUS STORE": func(tx redis.Pipeliner) error {
			tx.Set(ctx, e.key(res, "first"), 1, 0)
			tx.GeoRadiusStore(ctx, e.key(res, "geo"), 1, 1, &redis.GeoRadiusQuery{Radius: 1, Unit: "km", Store: other})
			return nil
		},
	} {
		err := e.store.Fenced(ctx, fence.NewGrant(res, 4), fn)
		if !errors.Is(err, fence.ErrInvalidArgument) || !containsAll(err.Error(), "command 2", other, "slot") {
			t.Fatalf("%s into another slot = %v, want ErrInvalidArgument naming the key and slots", name, err)
		}
	}
	if n := e.sent.n.Load(); n != 0 {
		t.Fatalf("%d commands sent for cross-slot transactions", n)
	}
	if _, found := e.get(t, e.key(res, "first")); found || e.mark(t, res) != 0 {
		t.Fatal("a refused cross-slot transaction wrote")
	}
}

// TestStore_commandTable checks that the Store reads the server's command table
// once, on the first Fenced that queues a command; that a failed read (a user
// the server's ACL denies COMMAND) is ErrCommandTable with nothing written and
// is read again on the next call; and that a reply that is not a command table
// is ErrCommandTable. Its client speaks RESP2, the other tests' RESP3.
func TestStore_commandTable(t *testing.T) {
	raw := ownNode(t)
	ctx := t.Context()
	if err := raw.Do(ctx, "acl", "setuser", "fenced", "on", ">pw", "~*", "+@all", "-command").Err(); err != nil {
		t.Fatal(err)
	}
	e := envOn(t, raw, redis.NewClient(&redis.Options{Addr: raw.Options().Addr, Username: "fenced", Password: "pw", Protocol: 2}))
	res := e.res("r")
	n := e.key(res, "n")
	incr := func(tok fence.Token) error {
		return e.store.Fenced(ctx, fence.NewGrant(res, tok), func(tx redis.Pipeliner) error {
			tx.Incr(ctx, n)
			return nil
		})
	}
	if err := e.store.Set(ctx, fence.NewGrant(res, 1), e.key(res, "s"), "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Fenced(ctx, fence.NewGrant(res, 1), func(redis.Pipeliner) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if c := e.sent.table.Load(); c != 0 {
		t.Fatalf("%d COMMAND sent before a Fenced queued a command", c)
	}
	err := incr(2)
	if !errors.Is(err, redisfence.ErrCommandTable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Fenced with COMMAND denied = %v, want ErrCommandTable with the server's NOPERM", err)
	}
	if _, found := e.get(t, n); found || e.mark(t, res) != 1 {
		t.Fatal("a Fenced whose commands could not be checked wrote")
	}
	if err := raw.Do(ctx, "acl", "setuser", "fenced", "+command").Err(); err != nil {
		t.Fatal(err)
	}
	for tok := range fence.Token(3) {
		if err := incr(tok + 3); err != nil {
			t.Fatalf("Fenced once COMMAND is allowed: %v", err)
		}
	}
	if c := e.sent.table.Load(); c != 2 {
		t.Fatalf("%d COMMAND sent, want 2: the failed read and one read kept for the next calls", c)
	}
	if v, _ := e.get(t, n); v != "3" {
		t.Fatalf("counter %s, want 3", v)
	}
	var sorted *redis.IntCmd
	if err := e.store.Fenced(ctx, fence.NewGrant(res, 6), func(tx redis.Pipeliner) error {
		tx.RPush(ctx, e.key(res, "list"), 2, 1)
		sorted = tx.SortStore(ctx, e.key(res, "list"), e.key(res, "sorted"), &redis.Sort{})
		return nil
	}); err != nil || sorted.Val() != 2 {
		t.Fatalf("SORT ... STORE (COMMAND GETKEYS) over RESP2: %v, %d", err, sorted.Val())
	}

	entry := func(a ...any) []any { return a }
	get := entry("get", int64(2), []any{"readonly"}, int64(1), int64(1), int64(1))
	for name, reply := range map[string][]any{
		"empty":           nil,
		"not an array":    {get, "set"},
		"too short":       {entry("get", int64(2), []any{}, int64(1), int64(1))},
		"no name":         {entry(int64(1), int64(2), []any{}, int64(1), int64(1), int64(1))},
		"arity not a int": {entry("get", "2", []any{}, int64(1), int64(1), int64(1))},
		"flags not array": {entry("get", int64(2), "readonly", int64(1), int64(1), int64(1))},
		"bad subcommand":  {entry("xgroup", int64(-2), []any{}, int64(0), int64(0), int64(0), nil, nil, nil, []any{"x"})},
	} {
		if err := redisfence.ParseCommandTableForTest(reply); !errors.Is(err, redisfence.ErrCommandTable) {
			t.Errorf("%s: %v, want ErrCommandTable", name, err)
		}
	}
	if err := redisfence.ParseCommandTableForTest([]any{get}); err != nil {
		t.Fatalf("a table of GET alone: %v", err)
	}
}

// TestStore_commandTable_concurrent checks that concurrent first calls of a new
// Store read the command table once between them.
func TestStore_commandTable_concurrent(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.res("r")
	n := e.key(res, "n")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			errs[i] = e.store.Fenced(ctx, fence.NewGrant(res, 1), func(tx redis.Pipeliner) error {
				tx.Incr(ctx, n)
				return nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c := e.sent.table.Load(); c != 1 {
		t.Fatalf("%d COMMAND sent by %d concurrent first calls, want 1", c, len(errs))
	}
	if v, _ := e.get(t, n); v != "8" {
		t.Fatalf("counter %s, want 8", v)
	}
}
