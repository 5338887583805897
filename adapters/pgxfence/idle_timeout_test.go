package pgxfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

// idleCase is one fenced transaction of TestStore_Fenced_idleTimeout: the statement
// that meets the ended transaction (next), and what it and Fenced returned.
type idleCase struct {
	name, next, tbl string
	store           *pgxfence.Store
	stmtErr, err    error
	done            chan struct{}
}

// TestStore_Fenced_idleTimeout lets a fenced transaction sit idle past the server's
// idle timeout (WithIdleTimeout(1s), then 2.5 s without a statement), pipelined and
// fence-first, and checks that whichever statement meets the ended transaction
// returns an error matching fence.ErrIdleTimeout and wrapping the server's 25P03:
// fn's own next statement (an Exec, a Query read to its end, a QueryRow, a batch;
// returned by fn, or swallowed), or COMMIT when fn sends nothing more. Nothing of the
// transaction is stored. The cases sit idle at once (a connection each), so the test
// waits out the timeout once, not once per case.
func TestStore_Fenced_idleTimeout(t *testing.T) {
	dsn := postgres.DSN(t)
	pool := poolOn(t, dsn, dsn, 16)
	var cases []*idleCase
	for _, first := range []bool{false, true} {
		opts := []pgxfence.Option{pgxfence.WithIdleTimeout(time.Second)}
		if first {
			opts = append(opts, pgxfence.WithFenceFirst())
		}
		store := newStore(pool, opts...)
		for _, next := range []string{"fn's statement", "swallowed", "query", "queryrow", "swallowed query", "batch", "commit"} {
			c := &idleCase{name: fmt.Sprintf("fenceFirst=%v/%s", first, next), next: next,
				tbl: fmt.Sprintf("idle_%d", len(cases)), store: store, done: make(chan struct{})}
			mustExec(t, pool, "CREATE TABLE "+c.tbl+" (id int PRIMARY KEY, val int NOT NULL)")
			mustExec(t, pool, "INSERT INTO "+c.tbl+" VALUES (1, 0)")
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		go func() {
			defer close(c.done)
			c.stmtErr, c.err = idleTx(t.Context(), c)
		}()
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			<-c.done
			t.Logf("Fenced: %v", c.err)
			if !errors.Is(c.err, fence.ErrIdleTimeout) {
				t.Fatalf("Fenced = %v, want an error matching fence.ErrIdleTimeout", c.err)
			}
			if c.next != "commit" && !errors.Is(c.stmtErr, fence.ErrIdleTimeout) {
				t.Fatalf("fn's statement = %v, want fence.ErrIdleTimeout", c.stmtErr)
			}
			if got := mustInt(t, pool, "SELECT val FROM "+c.tbl+" WHERE id = 1"); got != 0 {
				t.Fatalf("val = %d after the ended transaction, want 0", got)
			}
			if got := stored(t, pool, "idle-"+c.tbl); got != 0 {
				t.Fatalf("stored token = %d, want none", got)
			}
		})
	}
}

// idleTx runs c's fenced transaction: one write, 2.5 s idle, then c.next. It
// returns the error of fn's next statement and Fenced's.
func idleTx(ctx context.Context, c *idleCase) (stmtErr, err error) {
	tbl := c.tbl
	err = fence.Exec(ctx, c.store, fence.NewGrant("idle-"+tbl, 5), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE "+tbl+" SET val = 5 WHERE id = 1"); err != nil {
			return err
		}
		time.Sleep(2500 * time.Millisecond) // idle past the server's timeout
		switch c.next {
		case "commit":
			return nil
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
		if strings.HasPrefix(c.next, "swallowed") {
			return nil
		}
		return stmtErr
	})
	return stmtErr, err
}
