package pgxfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
)

// terminateWhen polls until a backend of this database other than pool's own runs a
// statement matching like and waits on waitType, then terminates it: the connection
// is cut while the statement is in flight.
func terminateWhen(t *testing.T, pool *pgxpool.Pool, like, waitType string) {
	t.Helper()
	for {
		var n int64
		err := pool.QueryRow(t.Context(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "+
			"WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' "+
			"AND query ILIKE $1 AND wait_event_type = $2", like, waitType).Scan(&n)
		if err != nil {
			if t.Context().Err() == nil {
				t.Errorf("terminate: %v", err)
			}
			return
		}
		if n > 0 {
			return
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// slowCommitTable creates a table whose inserted rows make COMMIT sleep (a deferred
// constraint trigger), so a test can cut the connection while COMMIT is in flight.
func slowCommitTable(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	tbl := fmt.Sprintf("slow_commit_%d", time.Now().UnixNano())
	for _, q := range []string{
		"CREATE TABLE " + tbl + " (id int PRIMARY KEY)",
		"CREATE OR REPLACE FUNCTION fgt_slow_commit() RETURNS trigger LANGUAGE plpgsql AS " +
			"$$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON " + tbl +
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fgt_slow_commit()",
	} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return tbl
}

// TestStore_Fenced_commitUnknown cuts the connection while COMMIT is in flight, on a
// pool (pipelined and fence-first) and on a single connection: Fenced returns an
// error matching fence.ErrCommitUnknown (and no other fence sentinel), the pool serves
// the next transaction, and the interrupted one did not commit.
func TestStore_Fenced_commitUnknown(t *testing.T) {
	pool := newPool(t)
	stores := map[string]func(t *testing.T) *pgxfence.Store{
		"pool pipelined":   func(t *testing.T) *pgxfence.Store { return newStore(pool) },
		"pool fence-first": func(t *testing.T) *pgxfence.Store { return fenceFirstStore(t, pool) },
		"conn": func(t *testing.T) *pgxfence.Store {
			conn, err := pgx.Connect(t.Context(), pool.Config().ConnConfig.ConnString())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
			return newStore(conn)
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			store, tbl := mk(t), slowCommitTable(t, pool)
			res := fmt.Sprintf("unknown-%s-%d", name, time.Now().UnixNano())
			killed := make(chan struct{})
			go func() { defer close(killed); terminateWhen(t, pool, "commit%", "Timeout") }()
			defer func() { <-killed }()
			err := fence.Exec(ctx, store, fence.NewGrant(res, 5), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO "+tbl+" VALUES (1)")
				return err
			})
			wantUnknown(t, err)
			if n := mustInt(t, pool, "SELECT count(*) FROM "+tbl); n != 0 {
				t.Fatalf("%d rows committed by a transaction terminated before its commit", n)
			}
			if name == "conn" {
				return
			}
			err = fence.Exec(ctx, store, fence.NewGrant(res, 6), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "SELECT 1")
				return err
			})
			if err != nil {
				t.Fatalf("the pool's next fenced transaction: %v", err)
			}
		})
	}
}

// TestStore_rows_commitUnknown cuts the connection of each single-row write while it
// waits for a row lock: its autocommit statement's outcome is unknown.
func TestStore_rows_commitUnknown(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	store := newStore(pool)
	tbl := fmt.Sprintf("rows_unknown_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (id text PRIMARY KEY, v int NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+tbl+" (id) VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	row := fence.Row{Table: tbl, Key: []fence.Col{{Name: "id", Value: "a"}}}
	writes := map[string]func(g fence.Grant) error{
		"update": func(g fence.Grant) error { return store.Update(ctx, g, row, fence.Col{Name: "v", Value: 1}) },
		"upsert": func(g fence.Grant) error { return store.Upsert(ctx, g, row, fence.Col{Name: "v", Value: 2}) },
		"delete": func(g fence.Grant) error { return store.Delete(ctx, g, row) },
	}
	for op, write := range writes {
		t.Run(op, func(t *testing.T) {
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(context.Background())
			if _, err := holder.Exec(ctx, "SELECT 1 FROM "+tbl+" WHERE id = 'a' FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			killed := make(chan struct{})
			go func() { defer close(killed); terminateWhen(t, pool, "%"+tbl+"%", "Lock") }()
			defer func() { <-killed }()
			wantUnknown(t, write(fence.NewGrant("rows-unknown-"+op, 5)))
		})
	}
}

func wantUnknown(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, fence.ErrCommitUnknown) {
		t.Fatalf("error = %v, want fence.ErrCommitUnknown", err)
	}
	for _, other := range []error{fence.ErrStale, fence.ErrLost, fence.ErrNotFound} {
		if errors.Is(err, other) {
			t.Fatalf("error %v also matches %v", err, other)
		}
	}
	if !fencetest.WrapsCause(err, fence.ErrCommitUnknown) {
		t.Fatalf("error %v wraps no driver error", err)
	}
}
