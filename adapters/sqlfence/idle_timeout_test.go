package sqlfence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// TestStore_Fenced_idleTimeout lets a fenced transaction sit idle past its server's
// idle timeout (WithIdleTimeout(1s), then 2.5 s without a statement) on MariaDB and
// PostgreSQL, and checks that whichever statement meets the ended transaction (fn's
// own next statement, an Exec or a QueryRow, returned or swallowed, or COMMIT when fn
// sends nothing more) returns an error matching fence.ErrIdleTimeout, and that
// nothing of the transaction was stored.
func TestStore_Fenced_idleTimeout(t *testing.T) {
	for _, d := range []migrations.Dialect{migrations.MySQL, migrations.Postgres} {
		for _, next := range []string{"fn's statement", "queryrow", "swallowed", "commit"} {
			if next == "swallowed" && d == migrations.Postgres {
				// fn holds the driver's own *sql.Tx: once fn swallows the 25P03, COMMIT
				// meets a closed connection, which database/sql does not tell from one
				// that died awaiting COMMIT's reply: fence.ErrCommitUnknown.
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", d, next), func(t *testing.T) {
				ctx := t.Context()
				var db *sql.DB
				if d == migrations.MySQL {
					db, _ = mysqlDB(t)
				} else {
					db, _ = postgresDB(t)
				}
				q := func(s string) string {
					if d == migrations.Postgres {
						return dollars(s)
					}
					return s
				}
				tbl := fmt.Sprintf("idle_%d", time.Now().UnixNano())
				mustExec(t, db, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY, val INT NOT NULL)")
				mustExec(t, db, "INSERT INTO "+tbl+" VALUES (1, 0)")
				store := newStore(db, d, sqlfence.WithIdleTimeout(time.Second))
				res := "idle-" + tbl
				var fnErr error
				err := fence.Exec(ctx, store, fence.NewGrant(res, 5), func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, "UPDATE "+tbl+" SET val = 5 WHERE id = 1"); err != nil {
						return err
					}
					time.Sleep(2500 * time.Millisecond) // idle past the server's timeout
					if next == "commit" {
						return nil
					}
					if next == "queryrow" {
						var v int
						fnErr = tx.QueryRowContext(ctx, "SELECT val FROM "+tbl+" WHERE id = 1").Scan(&v)
						return fnErr
					}
					_, err := tx.ExecContext(ctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1")
					if next == "swallowed" {
						return nil
					}
					fnErr = err
					return fnErr
				})
				t.Logf("Fenced: %v", err)
				if !errors.Is(err, fence.ErrIdleTimeout) {
					t.Fatalf("Fenced = %v, want an error matching fence.ErrIdleTimeout", err)
				}
				if fnErr != nil && !errors.Is(err, fnErr) {
					t.Fatalf("Fenced = %v, want it to wrap fn's error %v", err, fnErr)
				}
				if got := queryInt(t, db, "SELECT val FROM "+tbl+" WHERE id = 1"); got != 0 {
					t.Fatalf("val = %d after the ended transaction, want 0", got)
				}
				var n int64
				if err := db.QueryRowContext(ctx, q("SELECT COUNT(*) FROM fence_tokens WHERE resource = ?"), res).Scan(&n); err != nil || n != 0 {
					t.Fatalf("fence rows of %q = %d, %v; want none", res, n, err)
				}
			})
		}
	}
}
