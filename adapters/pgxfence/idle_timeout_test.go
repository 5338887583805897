package pgxfence_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

// TestStore_Fenced_idleTimeout lets a fenced transaction sit idle past the server's
// idle timeout (WithIdleTimeout(1s), then 2.5 s without a statement), pipelined and
// fence-first, and checks that whichever statement meets the ended transaction
// returns an error matching fence.ErrIdleTimeout and wrapping the server's 25P03:
// fn's own next statement (an Exec, a Query read to its end, a QueryRow, a batch;
// returned by fn, or swallowed), or COMMIT when fn sends nothing more. Nothing of the
// transaction is stored.
func TestStore_Fenced_idleTimeout(t *testing.T) {
	pool := newPool(t)
	for _, first := range []bool{false, true} {
		opts := []pgxfence.Option{pgxfence.WithIdleTimeout(time.Second)}
		if first {
			opts = append(opts, pgxfence.WithFenceFirst())
		}
		store := newStore(pool, opts...)
		for _, next := range []string{"fn's statement", "swallowed", "query", "queryrow", "swallowed query", "batch", "commit"} {
			t.Run(fmt.Sprintf("fenceFirst=%v/%s", first, next), func(t *testing.T) {
				ctx := t.Context()
				tbl := fmt.Sprintf("idle_%d", time.Now().UnixNano())
				mustExec(t, pool, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, val int NOT NULL)")
				mustExec(t, pool, "INSERT INTO "+tbl+" VALUES (1, 0)")
				res := "idle-" + tbl
				var stmtErr error
				err := fence.Exec(ctx, store, fence.NewGrant(res, 5), func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE "+tbl+" SET val = 5 WHERE id = 1"); err != nil {
						return err
					}
					time.Sleep(2500 * time.Millisecond) // idle past the server's timeout
					if next == "commit" {
						return nil
					}
					switch next {
					case "query", "swallowed query":
						var rows pgx.Rows
						if rows, stmtErr = tx.Query(ctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1 RETURNING val"); stmtErr == nil {
							for rows.Next() {
							}
							stmtErr = rows.Err()
						}
					case "batch":
						b := &pgx.Batch{}
						b.Queue("UPDATE " + tbl + " SET val = 6 WHERE id = 1")
						br := tx.SendBatch(ctx, b)
						_, stmtErr = br.Exec()
						_ = br.Close()
					case "queryrow":
						var v int
						stmtErr = tx.QueryRow(ctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1 RETURNING val").Scan(&v)
					default:
						_, stmtErr = tx.Exec(ctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1")
					}
					if strings.HasPrefix(next, "swallowed") {
						return nil
					}
					return stmtErr
				})
				t.Logf("Fenced: %v", err)
				if !errors.Is(err, fence.ErrIdleTimeout) {
					t.Fatalf("Fenced = %v, want an error matching fence.ErrIdleTimeout", err)
				}
				if next != "commit" && !errors.Is(stmtErr, fence.ErrIdleTimeout) {
					t.Fatalf("fn's statement = %v, want fence.ErrIdleTimeout", stmtErr)
				}
				if got := mustInt(t, pool, "SELECT val FROM "+tbl+" WHERE id = 1"); got != 0 {
					t.Fatalf("val = %d after the ended transaction, want 0", got)
				}
				if got := stored(t, pool, res); got != 0 {
					t.Fatalf("stored token = %d, want none", got)
				}
			})
		}
	}
}
