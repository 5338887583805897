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
	"github.com/fencegate/fencegate/migrations"
)

// idleCase is one fenced transaction of TestStore_Fenced_idleTimeout: the statement
// that meets the ended transaction (next), and what fn's statement and Fenced
// returned.
type idleCase struct {
	name, next, tbl string
	d               migrations.Dialect
	db              *sql.DB
	fnErr, err      error
	done            chan struct{}
}

// TestStore_Fenced_idleTimeout lets a fenced transaction sit idle past its server's
// idle timeout (WithIdleTimeout(1s), then 2.5 s without a statement) on MariaDB and
// PostgreSQL, and checks that whichever statement meets the ended transaction (fn's
// own next statement, an Exec or a QueryRow, returned or swallowed, or COMMIT when fn
// sends nothing more) returns an error matching fence.ErrIdleTimeout, and that
// nothing of the transaction was stored. The cases sit idle at once, so the test
// waits out the timeout once, not once per case.
func TestStore_Fenced_idleTimeout(t *testing.T) {
	var cases []*idleCase
	for _, d := range []migrations.Dialect{migrations.MySQL, migrations.Postgres} {
		var db *sql.DB
		if d == migrations.MySQL {
			db, _ = mysqlDB(t)
		} else {
			db, _ = postgresDB(t)
		}
		for _, next := range []string{"fn's statement", "queryrow", "swallowed", "commit"} {
			if next == "swallowed" && d == migrations.Postgres {
				// fn holds the driver's own *sql.Tx: once fn swallows the 25P03, COMMIT
				// meets a closed connection, which database/sql does not tell from one
				// that died awaiting COMMIT's reply: fence.ErrCommitUnknown.
				continue
			}
			c := &idleCase{name: fmt.Sprintf("%v/%s", d, next), next: next, d: d, db: db,
				tbl: fmt.Sprintf("idle_%d", len(cases)), done: make(chan struct{})}
			mustExec(t, db, "CREATE TABLE "+c.tbl+" (id INT PRIMARY KEY, val INT NOT NULL)")
			mustExec(t, db, "INSERT INTO "+c.tbl+" VALUES (1, 0)")
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		go func() {
			defer close(c.done)
			c.fnErr, c.err = idleTx(t.Context(), c)
		}()
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			<-c.done
			t.Logf("Fenced: %v", c.err)
			if !errors.Is(c.err, fence.ErrIdleTimeout) {
				t.Fatalf("Fenced = %v, want an error matching fence.ErrIdleTimeout", c.err)
			}
			if c.fnErr != nil && !errors.Is(c.err, c.fnErr) {
				t.Fatalf("Fenced = %v, want it to wrap fn's error %v", c.err, c.fnErr)
			}
			if got := queryInt(t, c.db, "SELECT val FROM "+c.tbl+" WHERE id = 1"); got != 0 {
				t.Fatalf("val = %d after the ended transaction, want 0", got)
			}
			q := "SELECT COUNT(*) FROM fence_tokens WHERE resource = ?"
			if c.d == migrations.Postgres {
				q = dollars(q)
			}
			var n int64
			if err := c.db.QueryRowContext(t.Context(), q, "idle-"+c.tbl).Scan(&n); err != nil || n != 0 {
				t.Fatalf("fence rows of %q = %d, %v; want none", "idle-"+c.tbl, n, err)
			}
		})
	}
}

// idleTx runs c's fenced transaction: one write, 2.5 s idle, then c.next. It
// returns the error fn kept of its next statement and Fenced's.
func idleTx(ctx context.Context, c *idleCase) (fnErr, err error) {
	tbl := c.tbl
	store := newStore(c.db, c.d, sqlfence.WithIdleTimeout(time.Second))
	err = fence.Exec(ctx, store, fence.NewGrant("idle-"+tbl, 5), func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE "+tbl+" SET val = 5 WHERE id = 1"); err != nil {
			return err
		}
		time.Sleep(2500 * time.Millisecond) // idle past the server's timeout
		switch c.next {
		case "commit":
			return nil
		case "queryrow":
			var v int
			fnErr = tx.QueryRowContext(ctx, "SELECT val FROM "+tbl+" WHERE id = 1").Scan(&v)
			return fnErr
		}
		_, err := tx.ExecContext(ctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1")
		if c.next == "swallowed" {
			return nil
		}
		fnErr = err
		return fnErr
	})
	return fnErr, err
}
