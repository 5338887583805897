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
	mode := pgx.QueryExecModeCacheDescribe
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
