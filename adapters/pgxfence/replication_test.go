package pgxfence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/pgrepltest"
	"github.com/fencegate/fencegate/migrations"
)

// replPool returns a pool on dsn (a pgrepltest node) after migrating it; watch sets
// WatchReplication on its config.
func replPool(t *testing.T, dsn string, watch bool) *pgxpool.Pool {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(t.Context(), db, migrations.Postgres); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if watch {
		pgxfence.WatchReplication(cfg.ConnConfig)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestStore_syncWaitCancelled: a fenced transaction whose COMMIT waits for the
// synchronous standby, and whose wait is cancelled, committed on the primary only:
// with WatchReplication Fenced says so (fence.ErrNotReplicated), where it returned nil.
// The next transaction on the same connections, replicated, returns nil again.
func TestStore_syncWaitCancelled(t *testing.T) {
	ctx := t.Context()
	pair := pgrepltest.Start(t, pgrepltest.Sync)
	for _, watch := range []bool{true, false} {
		pool := replPool(t, pair.Primary.DSN(), watch)
		mustExec(t, pool, "CREATE TABLE IF NOT EXISTS ledger (id int, watched bool)")
		store := newStore(pool)
		write := func(tok fence.Token) error {
			return store.Fenced(ctx, fence.NewGrant("ledger", tok), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1, $2)", int(tok), watch)
				return err
			})
		}
		base := fence.Token(10)
		if !watch {
			base = 20
		}
		if err := write(base + 1); err != nil {
			t.Fatalf("replicated write: %v", err)
		}
		pair.HoldReplication()
		done := make(chan error, 1)
		go func() { done <- write(base + 2) }()
		pair.CancelSyncWaits(t)
		err := <-done
		pair.ResumeReplication()
		switch {
		case watch && !errors.Is(err, fence.ErrNotReplicated):
			t.Errorf("watched: cancelled wait returned %v, want fence.ErrNotReplicated", err)
		case !watch && err != nil:
			t.Errorf("unwatched: cancelled wait returned %v, want nil (nothing tells it)", err)
		}
		t.Logf("watch=%v: %v", watch, err)
		if got := mustInt(t, pool, "SELECT count(*) FROM ledger WHERE id = $1", int(base+2)); got != 1 {
			t.Errorf("the write committed on the primary %d times, want 1", got)
		}
		for range 3 { // every connection of the pool: no warning is left behind
			if err := write(base + 3); err != nil {
				t.Errorf("replicated write after: %v", err)
			}
		}
	}
}

// TestStore_syncWaitCtxEnds: a fenced COMMIT waiting for a held synchronous standby,
// whose ctx is cancelled: pgx closes the connection, and Fenced returns
// fence.ErrCommitUnknown, not a bare context.Canceled: the write lands all the same.
func TestStore_syncWaitCtxEnds(t *testing.T) {
	pair := pgrepltest.Start(t, pgrepltest.Sync)
	pool := replPool(t, pair.Primary.DSN(), true)
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS ledger (id int, watched bool)")
	store := newStore(pool)
	tests := []struct {
		name   string
		token  fence.Token
		cancel func(context.CancelCauseFunc)
	}{
		{"cancel", 31, func(c context.CancelCauseFunc) { c(nil) }},
		{"cancel with a cause", 32, func(c context.CancelCauseFunc) { c(errors.New("shutting down")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pair.HoldReplication()
			ctx, cancel := context.WithCancelCause(t.Context())
			defer cancel(nil)
			done := make(chan error, 1)
			go func() {
				done <- store.Fenced(ctx, fence.NewGrant("ledger", tt.token), func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1, true)", int(tt.token))
					return err
				})
			}()
			for n := int64(0); n == 0; { // the COMMIT waits for the standby
				n = mustInt(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
			}
			tt.cancel(cancel)
			err := <-done
			pair.ResumeReplication()
			if !errors.Is(err, fence.ErrCommitUnknown) {
				t.Errorf("Fenced after its ctx ended in the wait = %v, want fence.ErrCommitUnknown", err)
			}
			for got := int64(0); got != 1; { // it committed, unknown to Fenced
				got = mustInt(t, pool, "SELECT count(*) FROM ledger WHERE id = $1", int(tt.token))
			}
		})
	}
}
