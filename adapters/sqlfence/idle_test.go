package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/testserver"
)

// The frozen holder runs as this test binary re-executed with these variables set.
const (
	idleChildEnv = "SQLFENCE_IDLE_CHILD" // the dialect's number
	idleDSNEnv   = "SQLFENCE_IDLE_DSN"
	idleTableEnv = "SQLFENCE_IDLE_TABLE"
	idleResEnv   = "SQLFENCE_IDLE_RESOURCE"
	childLease   = 2 * time.Second
)

// leasedGrant is a grant that knows its lease (fence.Leased).
type leasedGrant struct {
	fence.Grant
	lease time.Duration
}

func (g leasedGrant) Lease() time.Duration { return g.lease }

// idleChild opens a fenced transaction with token 5 and a 2 s lease, writes, says it
// is ready and waits for stdin to close (the parent stops it there), then returns
// from fn so that Fenced commits; it prints how that ended.
func idleChild() int {
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv(idleChildEnv))
	d := migrations.Dialect(n)
	var (
		db  *sql.DB
		err error
	)
	if d == migrations.MySQL {
		db, err = mysql.Open(os.Getenv(idleDSNEnv))
	} else {
		db, err = sql.Open("pgx", os.Getenv(idleDSNEnv))
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer db.Close()
	store := newStore(db, d)
	g := leasedGrant{fence.NewGrant(os.Getenv(idleResEnv), 5), childLease}
	err = fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
		q := "UPDATE " + os.Getenv(idleTableEnv) + " SET val = 5 WHERE id = 1"
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
		fmt.Println(testserver.ChildReadyLine)
		_, _ = io.Copy(io.Discard, os.Stdin)
		return nil
	})
	fmt.Printf("idle-timeout=%v err=%v\n", errors.Is(err, fence.ErrIdleTimeout), err)
	return 0
}

// TestStore_Fenced_frozenHolder freezes (SIGSTOP) a process holding an open fenced
// transaction with a 2 s lease, on MariaDB and PostgreSQL: the server ends that
// transaction after about the lease, so the successor's fenced write completes
// (within a generous bound), and the frozen holder, once resumed, gets
// fence.ErrIdleTimeout and nothing of its transaction is stored.
func TestStore_Fenced_frozenHolder(t *testing.T) {
	for _, d := range []migrations.Dialect{migrations.MySQL, migrations.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := t.Context()
			var db *sql.DB
			var dsn string
			if d == migrations.MySQL {
				db, dsn = mysqlDB(t)
			} else {
				db, dsn = postgresDB(t)
			}
			tbl := fmt.Sprintf("frozen_%d", time.Now().UnixNano())
			res := "frozen-" + tbl
			mustExec(t, db, "CREATE TABLE "+tbl+" (id INT PRIMARY KEY, val INT NOT NULL)")
			mustExec(t, db, "INSERT INTO "+tbl+" VALUES (1, 0)")
			child := testserver.StartFrozen(t, []string{idleChildEnv + "=" + strconv.Itoa(int(d)),
				idleDSNEnv + "=" + dsn, idleTableEnv + "=" + tbl, idleResEnv + "=" + res})

			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, childLease+30*time.Second)
			defer cancel()
			err := fence.Exec(wctx, newStore(db, d), fence.NewGrant(res, 6), func(tx *sql.Tx) error {
				_, err := tx.ExecContext(wctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1")
				return err
			})
			waited := time.Since(start)
			if err != nil {
				t.Fatalf("the successor's write after %v: %v", waited, err)
			}
			t.Logf("%s: the successor wrote after %v (lease %v)", d, waited, childLease)
			// The holder is still frozen: the successor got its row lock only because the
			// server ended the idle transaction, so its write landing is the proof, not a time.
			result := child.Resume(t)
			t.Logf("%s: the resumed holder: %s", d, result)
			if !strings.Contains(result, "idle-timeout=true") {
				t.Fatalf("the resumed holder's Fenced: %q, want fence.ErrIdleTimeout", result)
			}
			if got := queryInt(t, db, "SELECT val FROM "+tbl+" WHERE id = 1"); got != 6 {
				t.Fatalf("val = %d, want the successor's 6", got)
			}
			q := "SELECT token FROM fence_tokens WHERE resource = ?"
			if d == migrations.Postgres {
				q = dollars(q)
			}
			if got := queryInt(t, db, q, res); got != 6 {
				t.Fatalf("stored token = %d, want 6", got)
			}
		})
	}
}
