package pgxfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
)

// bouncerPool returns a pool of 32 through PgBouncer (8 server connections) on a fresh
// migrated database, in pgx's default exec mode (QueryExecModeCacheStatement).
func bouncerPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	via, direct := bouncer.DSNs(t)
	pool := poolOn(t, via, direct, 32)
	if m := pool.Config().ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement {
		t.Fatalf("pool exec mode %v, want pgx's default", m)
	}
	return pool
}

// TestSuite_pgbouncer runs the conformance suite through PgBouncer in transaction
// pooling with WithPooler, on a pool in pgx's default exec mode. The suite's own
// statements outside a fenced transaction name an exec mode a pooler takes; the
// Store's, and fn's through its pgx.Tx, use the pool's.
func TestSuite_pgbouncer(t *testing.T) {
	pool := bouncerPool(t)
	mode := pgx.QueryExecModeCacheDescribe
	for _, first := range []bool{false, true} {
		opts, name := []pgxfence.Option{pgxfence.WithPooler()}, "pooler"
		if first {
			opts, name = append(opts, pgxfence.WithFenceFirst()), "pooler-fence-first"
		}
		store := newStore(pool, opts...)
		t.Run(name, func(t *testing.T) {
			fencetest.Run(t, fencetest.Harness[pgx.Tx]{
				Name:  "pgxfence/" + name,
				Store: store,
				Exec: func(ctx context.Context, q string, args ...any) error {
					return suiteExec(ctx, pool, q, append([]any{mode}, args...)...)
				},
				QueryInt: func(ctx context.Context, q string, args ...any) (int64, error) {
					return queryInt(ctx, pool, q, append([]any{mode}, args...)...)
				},
				TxExec: suiteExec[pgx.Tx],
				TxQueryInt: func(ctx context.Context, tx pgx.Tx, q string, args ...any) (int64, error) {
					return queryInt(ctx, tx, q, args...)
				},
				FenceFirst: first,
			})
		})
	}
}

// hammer runs 32 clients, each making 20 fenced transactions and 20 single-row
// updates on 4 resources with rising tokens, and returns every error that is not a
// stale refusal, and the highest token acknowledged per resource.
func hammer(t *testing.T, pool *pgxpool.Pool, store *pgxfence.Store) ([]error, map[string]int64) {
	t.Helper()
	ctx := t.Context()
	mode := pgx.QueryExecModeExec // works through a pooler, with or without a description cache
	for i := range 4 {
		mustExec(t, pool, "INSERT INTO pooled (id, val, fence_token) VALUES ($1, 0, 0)", mode, i)
	}
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs []error
		high = map[string]int64{}
		wg   sync.WaitGroup
	)
	for c := range 32 {
		wg.Go(func() {
			for i := range 20 {
				id := (c + i) % 4
				res := fmt.Sprintf("pooled-%d", id)
				tok := next.Add(1)
				g := fence.NewGrant(res, fence.Token(tok))
				var err error
				if i%2 == 0 {
					err = store.Fenced(ctx, g, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, "UPDATE pooled SET val = val + 1 WHERE id = $1", id)
						return err
					})
				} else {
					err = store.Update(ctx, g, fence.Row{Table: "pooled", Key: []fence.Col{{Name: "id", Value: id}}},
						fence.Col{Name: "val", Value: tok})
				}
				mu.Lock()
				switch {
				case err == nil:
					high[res] = max(high[res], tok)
				case !errors.Is(err, fence.ErrStale):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs, high
}

// TestStore_pooler_32clients: through PgBouncer with WithPooler, 32 clients on 8
// server connections in pgx's default exec mode: no error but stale refusals, and each
// mark ends at the highest token acknowledged.
func TestStore_pooler_32clients(t *testing.T) {
	pool := bouncerPool(t)
	mustExec(t, pool, "CREATE TABLE pooled (id int PRIMARY KEY, val bigint NOT NULL, fence_token bigint NOT NULL DEFAULT 0)", pgx.QueryExecModeSimpleProtocol)
	errs, high := hammer(t, pool, newStore(pool, pgxfence.WithPooler()))
	for _, err := range errs {
		t.Error(err)
	}
	for res, tok := range high {
		if got := mustInt(t, pool, "SELECT token FROM fence_tokens WHERE resource = $1", pgx.QueryExecModeCacheDescribe, res); got < tok {
			t.Errorf("mark of %s = %d, below the acknowledged %d", res, got, tok)
		}
	}
}

// TestStore_pooler_hint: the same without WithPooler fails on prepared statements
// (42P05, 26000), and every such error Fenced or Update returns names the fix, fn's
// own statements' too.
func TestStore_pooler_hint(t *testing.T) {
	pool := bouncerPool(t)
	mustExec(t, pool, "CREATE TABLE pooled (id int PRIMARY KEY, val bigint NOT NULL, fence_token bigint NOT NULL DEFAULT 0)", pgx.QueryExecModeSimpleProtocol)
	errs, _ := hammer(t, pool, newStore(pool))
	if len(errs) == 0 {
		t.Fatal("no error through the pooler without WithPooler: the test shows nothing")
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "WithPooler") {
			t.Errorf("does not name WithPooler: %v", err)
		}
	}
	t.Logf("%d errors; first: %v", len(errs), errs[0])
}

// TestStore_pooler_literals: under WithPooler the raise carries the resource as a
// literal: quotes, backslashes and a set of several stay data, never SQL.
func TestStore_pooler_literals(t *testing.T) {
	ctx := t.Context()
	pool := bouncerPool(t)
	store := newStore(pool, pgxfence.WithPooler())
	names := []string{`it's`, `back\slash`, `\'; DROP TABLE fence_tokens; --`, `E'x'`}
	for _, res := range names {
		if err := store.Fenced(ctx, fence.NewGrant(res, 7), func(pgx.Tx) error { return nil }); err != nil {
			t.Fatalf("%q: %v", res, err)
		}
		if err := store.Fenced(ctx, fence.NewGrant(res, 6), func(pgx.Tx) error { return nil }); !errors.Is(err, fence.ErrStale) {
			t.Errorf("%q at a lower token: %v, want fence.ErrStale", res, err)
		}
	}
	set := idleSet{fence.NewGrant(names[0], 9), []string{names[0], names[1], "plain"}}
	if err := store.Fenced(ctx, set, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("set: %v", err)
	}
	for _, res := range append(names, "plain") {
		want := int64(9)
		if res == names[2] || res == names[3] {
			want = 7
		}
		if got := mustInt(t, pool, "SELECT token FROM fence_tokens WHERE resource = $1", pgx.QueryExecModeCacheDescribe, res); got != want {
			t.Errorf("mark of %q = %d, want %d", res, got, want)
		}
	}
}

// onceHammer runs 32 clients, each making 10 Once calls with fn (half of them replays
// of another client's key), and returns every error.
func onceHammer(t *testing.T, s *pgxfence.Store, fn func(ctx context.Context, tx pgx.Tx, key string) error) []error {
	t.Helper()
	ctx := t.Context()
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for c := range 32 {
		wg.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("once-%d", (c*10+i)%160)
				_, err := s.Once(ctx, key, "fp", func(tx pgx.Tx) ([]byte, error) {
					return nil, fn(ctx, tx, key)
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// TestOnce_pooler: through PgBouncer in pgx's default exec mode, 320 concurrent Once
// calls whose fn writes and reads with arguments: with WithPooler none fails and each
// key's work ran once; without it they fail, and every error names the fix.
func TestOnce_pooler(t *testing.T) {
	count := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, "INSERT INTO onced (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = onced.n + 1", key)
		return err
	}
	fns := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx, key string) error
	}{
		{"exec and query row", func(ctx context.Context, tx pgx.Tx, key string) error {
			if err := count(ctx, tx, key); err != nil {
				return err
			}
			var n int
			return tx.QueryRow(ctx, "SELECT n FROM onced WHERE k = $1", key).Scan(&n)
		}},
		{"query", func(ctx context.Context, tx pgx.Tx, key string) error {
			rows, err := tx.Query(ctx, "INSERT INTO onced (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = onced.n + 1 RETURNING n", key)
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		}},
		{"savepoint", func(ctx context.Context, tx pgx.Tx, key string) error {
			return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error { return count(ctx, sp, key) })
		}},
	}
	for _, f := range fns {
		for _, pooler := range []bool{true, false} {
			name := f.name + "/pooler"
			var opts []pgxfence.Option
			if pooler {
				opts = append(opts, pgxfence.WithPooler())
			} else {
				name = f.name + "/without"
			}
			t.Run(name, func(t *testing.T) {
				pool := bouncerPool(t)
				mustExec(t, pool, "CREATE TABLE onced (k text PRIMARY KEY, n int NOT NULL)", pgx.QueryExecModeSimpleProtocol)
				errs := onceHammer(t, newStore(pool, opts...), f.fn)
				if !pooler {
					if len(errs) == 0 {
						t.Fatal("no error through the pooler without WithPooler: the test shows nothing")
					}
					for _, err := range errs {
						if !strings.Contains(err.Error(), "WithPooler") {
							t.Errorf("does not name WithPooler: %v", err)
						}
					}
					t.Logf("%d errors; first: %v", len(errs), errs[0])
					return
				}
				for _, err := range errs {
					t.Error(err)
				}
				if n := mustInt(t, pool, "SELECT count(*) FROM onced WHERE n = 1", pgx.QueryExecModeCacheDescribe); n != 160 {
					t.Errorf("%d of 160 keys' work ran exactly once", n)
				}
			})
		}
	}
}

// TestStore_pooler_describeExec: through PgBouncer without WithPooler, on a pool in
// describe_exec (pgx describes an unnamed statement in one round trip and runs it in
// the next, which outside a transaction may reach another server connection): no
// fenced write, single-row write or Once fails or runs its values in another client's
// statement, and each mark ends at the highest token acknowledged.
func TestStore_pooler_describeExec(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, pool *pgxpool.Pool, s *pgxfence.Store) []error
	}{
		{"fenced and update", func(t *testing.T, pool *pgxpool.Pool, s *pgxfence.Store) []error {
			errs, high := hammer(t, pool, s)
			for res, tok := range high {
				if got := mustInt(t, pool, "SELECT token FROM fence_tokens WHERE resource = $1", pgx.QueryExecModeExec, res); got < tok {
					t.Errorf("mark of %s = %d, below the acknowledged %d", res, got, tok)
				}
			}
			return errs
		}},
		{"once", func(t *testing.T, pool *pgxpool.Pool, s *pgxfence.Store) []error {
			mustExec(t, pool, "CREATE TABLE onced (k text PRIMARY KEY, n int NOT NULL)", pgx.QueryExecModeSimpleProtocol)
			errs := onceHammer(t, s, func(ctx context.Context, tx pgx.Tx, key string) error {
				_, err := tx.Exec(ctx, "INSERT INTO onced (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = onced.n + 1", key)
				return err
			})
			if n := mustInt(t, pool, "SELECT count(*) FROM onced WHERE n = 1", pgx.QueryExecModeExec); n != 160 {
				t.Errorf("%d of 160 keys' work ran exactly once", n)
			}
			return errs
		}},
	}
	for _, params := range []string{"", "&description_cache_capacity=0"} {
		for _, tt := range tests {
			t.Run(tt.name+params, func(t *testing.T) {
				via, direct := bouncer.DSNs(t)
				pool := poolOn(t, via+"&default_query_exec_mode=describe_exec"+params, direct, 32)
				mustExec(t, pool, "CREATE TABLE pooled (id int PRIMARY KEY, val bigint NOT NULL, fence_token bigint NOT NULL DEFAULT 0)", pgx.QueryExecModeSimpleProtocol)
				errs := tt.run(t, pool, newStore(pool))
				for i, err := range errs {
					if i < 10 {
						t.Error(err)
					}
				}
				if len(errs) > 0 {
					t.Errorf("%d errors", len(errs))
				}
			})
		}
	}
}
