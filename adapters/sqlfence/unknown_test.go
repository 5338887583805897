package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
)

// killWhen polls until a session other than db's own runs a statement matching like
// while waiting (PostgreSQL: wait_event_type = wait; MariaDB: a state LIKE wait), then
// ends it from the server (pg_terminate_backend, KILL): its reply is lost.
func killWhen(t *testing.T, db *sql.DB, d migrations.Dialect, like, wait string) {
	t.Helper()
	for {
		var err error
		killed := false
		if d == migrations.Postgres {
			var n int64
			err = db.QueryRowContext(t.Context(), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "+
				"WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' "+
				"AND query ILIKE $1 AND wait_event_type = $2", like, wait).Scan(&n)
			killed = n > 0
		} else {
			var id int64
			err = db.QueryRowContext(t.Context(), "SELECT id FROM information_schema.processlist "+
				"WHERE id <> CONNECTION_ID() AND info LIKE ? AND state LIKE ? LIMIT 1", like, wait).Scan(&id)
			if err == nil {
				_, err = db.ExecContext(t.Context(), fmt.Sprintf("KILL CONNECTION %d", id))
				killed = err == nil
			}
			if errors.Is(err, sql.ErrNoRows) {
				err = nil
			}
		}
		if err != nil {
			if t.Context().Err() == nil {
				t.Errorf("kill: %v", err)
			}
			return
		}
		if killed {
			return
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// blockCommits makes the next COMMIT of a transaction that wrote wait: on PostgreSQL a
// deferred constraint trigger on tbl sleeps; on MariaDB another session holds FLUSH
// TABLES WITH READ LOCK, which blocks commits, until the returned function runs.
func blockCommits(t *testing.T, db *sql.DB, d migrations.Dialect, tbl string) (hold func(), release func()) {
	t.Helper()
	ctx := t.Context()
	if d == migrations.Postgres {
		mustExec(t, db, "CREATE OR REPLACE FUNCTION fgt_slow_commit() RETURNS trigger LANGUAGE plpgsql AS "+
			"$$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$")
		mustExec(t, db, "CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON "+tbl+
			" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fgt_slow_commit()")
		return func() {}, func() {}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hold = func() {
		if _, err := conn.ExecContext(ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
			t.Errorf("FLUSH TABLES WITH READ LOCK: %v", err)
		}
	}
	release = func() { _, _ = conn.ExecContext(context.Background(), "UNLOCK TABLES") }
	return hold, release
}

// TestStore_commitUnknown ends the session while COMMIT (Fenced, Upsert, Delete) or
// the autocommit statement (Update) is in flight, on PostgreSQL and MariaDB: each
// returns an error matching fence.ErrCommitUnknown and no other fence sentinel, the
// pool serves the next write, and the interrupted transaction did not commit.
// SQLite runs COMMIT in-process: no reply can be lost there.
func TestStore_commitUnknown(t *testing.T) {
	for _, d := range []migrations.Dialect{migrations.Postgres, migrations.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			var db *sql.DB
			if d == migrations.Postgres {
				db, _ = postgresDB(t)
			} else {
				db, _ = mysqlDB(t)
			}
			store := newStore(db, d)
			rebind := func(q string) string { return q }
			wait := "%"
			if d == migrations.Postgres {
				rebind, wait = dollars, "Lock"
			}
			t.Run("Fenced", func(t *testing.T) { testFencedUnknown(t, db, d, store) })
			t.Run("rows", func(t *testing.T) { testRowsUnknown(t, db, d, store, rebind, wait) })
		})
	}
}

func testFencedUnknown(t *testing.T, db *sql.DB, d migrations.Dialect, store *sqlfence.Store) {
	ctx := t.Context()
	tbl := fmt.Sprintf("slow_commit_%d", time.Now().UnixNano())
	mustExec(t, db, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY)")
	hold, release := blockCommits(t, db, d, tbl)
	defer release()
	res := fmt.Sprintf("unknown-%d", time.Now().UnixNano())
	commitWait := "Timeout"
	if d == migrations.MySQL {
		commitWait = "%"
	}
	killed := make(chan struct{})
	go func() { defer close(killed); killWhen(t, db, d, "commit%", commitWait) }()
	defer func() { <-killed }()
	err := fence.Exec(ctx, store, fence.NewGrant(res, 5), func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+tbl+" VALUES (1)"); err != nil {
			return err
		}
		hold()
		return nil
	})
	release()
	wantUnknown(t, err)
	// PostgreSQL ends the deferred trigger's sleep before the commit record; MariaDB
	// may finish a commit its KILL interrupted (it has been seen to): exactly why the
	// outcome is reported as unknown.
	n := queryInt(t, db, "SELECT COUNT(*) FROM "+tbl)
	if n > 1 || (d == migrations.Postgres && n != 0) {
		t.Fatalf("%d rows committed by a transaction ended during its commit", n)
	}
	t.Logf("%s: the interrupted transaction committed %d rows", d, n)
	err = fence.Exec(ctx, store, fence.NewGrant(res, 6), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		t.Fatalf("the pool's next fenced transaction: %v", err)
	}
}

func testRowsUnknown(t *testing.T, db *sql.DB, d migrations.Dialect, store *sqlfence.Store, rebind func(string) string, wait string) {
	ctx := t.Context()
	tbl := fmt.Sprintf("rows_unknown_%d", time.Now().UnixNano())
	mustExec(t, db, "CREATE TABLE "+tbl+" (id VARCHAR(20) PRIMARY KEY, v INT NOT NULL DEFAULT 0, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO "+tbl+" (id) VALUES ('a')")
	row := fence.Row{Table: tbl, Key: []fence.Col{{Name: "id", Value: "a"}}}
	// The resource has a mark already, so Update is one autocommit statement (MySQL
	// writes a resource's first mark in a transaction).
	if err := fence.Exec(ctx, store, fence.NewGrant("rows-unknown", 4), func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Update waits for the row lock inside its statement; Upsert and Delete, which
	// raise the fence row in a transaction, wait at their statement too, so their
	// COMMIT is cut by blocking commits instead. Update alone is autocommit.
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, rebind("SELECT id FROM "+tbl+" WHERE id = ? FOR UPDATE"), "a"); err != nil {
		t.Fatal(err)
	}
	killed := make(chan struct{})
	go func() { defer close(killed); killWhen(t, db, d, "%UPDATE%"+tbl+"%", wait) }()
	defer func() { <-killed }()
	wantUnknown(t, store.Update(ctx, fence.NewGrant("rows-unknown", 5), row, fence.Col{Name: "v", Value: 1}))
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := store.Update(ctx, fence.NewGrant("rows-unknown", 6), row, fence.Col{Name: "v", Value: 2}); err != nil {
		t.Fatalf("the pool's next Update: %v", err)
	}
}

func wantUnknown(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, fence.ErrCommitUnknown) {
		t.Fatalf("error = %v, want fence.ErrCommitUnknown", err)
	}
	for _, other := range []error{fence.ErrStale, fence.ErrLost, fence.ErrNotFound, fence.ErrBusy} {
		if errors.Is(err, other) {
			t.Fatalf("error %v also matches %v", err, other)
		}
	}
	if !fencetest.WrapsCause(err, fence.ErrCommitUnknown) {
		t.Fatalf("error %v wraps no driver error", err)
	}
}
