package pgxfence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver"
)

// The frozen holder runs as this test binary re-executed with these variables set.
const (
	idleChildEnv = "PGXFENCE_IDLE_CHILD" // the DSN
	idleTableEnv = "PGXFENCE_IDLE_TABLE"
	idleResEnv   = "PGXFENCE_IDLE_RESOURCE"
	idleFirstEnv = "PGXFENCE_IDLE_FENCE_FIRST"
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
	pool, err := pgxpool.New(ctx, os.Getenv(idleChildEnv))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer pool.Close()
	var opts []pgxfence.Option
	if os.Getenv(idleFirstEnv) != "" {
		opts = append(opts, pgxfence.WithFenceFirst())
	}
	store, err := pgxfence.New(pool, opts...)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	g := leasedGrant{fence.NewGrant(os.Getenv(idleResEnv), 5), childLease}
	err = fence.Exec(ctx, store, g, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE "+os.Getenv(idleTableEnv)+" SET val = 5 WHERE id = 1"); err != nil {
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
// transaction with a 2 s lease: the server ends that transaction after about the
// lease, so the successor's fenced write completes (within a generous bound), and the
// frozen holder, once resumed, gets ErrIdleTimeout and nothing of its transaction is
// stored. Pipelined and fence-first.
func TestStore_Fenced_frozenHolder(t *testing.T) {
	pool := newPool(t)
	for _, first := range []bool{false, true} {
		t.Run(fmt.Sprintf("fenceFirst=%v", first), func(t *testing.T) {
			ctx := t.Context()
			tbl := fmt.Sprintf("frozen_%d", time.Now().UnixNano())
			res := "frozen-" + tbl
			mustExec(t, pool, "CREATE TABLE "+tbl+" (id int PRIMARY KEY, val int NOT NULL)")
			mustExec(t, pool, "INSERT INTO "+tbl+" VALUES (1, 0)")
			env := []string{idleChildEnv + "=" + pool.Config().ConnConfig.ConnString(), idleTableEnv + "=" + tbl, idleResEnv + "=" + res}
			if first {
				env = append(env, idleFirstEnv+"=1")
			}
			child := testserver.StartFrozen(t, env)

			start := time.Now()
			wctx, cancel := context.WithTimeout(ctx, childLease+30*time.Second)
			defer cancel()
			err := fence.Exec(wctx, newStore(pool), fence.NewGrant(res, 6), func(tx pgx.Tx) error {
				_, err := tx.Exec(wctx, "UPDATE "+tbl+" SET val = 6 WHERE id = 1")
				return err
			})
			waited := time.Since(start)
			if err != nil {
				t.Fatalf("the successor's write after %v: %v", waited, err)
			}
			t.Logf("the successor wrote after %v (lease %v)", waited, childLease)
			// The holder is still frozen: the successor got its row lock only because the
			// server ended the idle transaction, so its write landing is the proof, not a time.
			result := child.Resume(t)
			if !strings.Contains(result, "idle-timeout=true") {
				t.Fatalf("the resumed holder's Fenced: %q, want ErrIdleTimeout", result)
			}
			if got := mustInt(t, pool, "SELECT val FROM "+tbl+" WHERE id = 1"); got != 6 {
				t.Fatalf("val = %d, want the successor's 6", got)
			}
			if got := stored(t, pool, res); got != 6 {
				t.Fatalf("stored token = %d, want 6", got)
			}
		})
	}
}

// idleSet is a fence.Set grant: its raise is the set form, which carries the idle
// timeout too.
type idleSet struct {
	fence.Grant
	res []string
}

func (s idleSet) Resources() []string { return s.res }

// TestStore_WithIdleTimeout checks what a fenced transaction's idle timeout is: the
// option's, else the grant's lease, else grant.DefaultIdleTimeout, in both raise
// modes and for a fence.Set; and that a timeout under a millisecond is refused.
func TestStore_WithIdleTimeout(t *testing.T) {
	pool := newPool(t)
	opt, err := pgxfence.New(pool, pgxfence.WithIdleTimeout(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	plain := newStore(pool)
	leased := leasedGrant{fence.NewGrant("idle-leased", 1), 3 * time.Second}
	tests := []struct {
		name  string
		store *pgxfence.Store
		g     fence.Grant
		want  string
	}{
		{"option", opt, leased, "1500ms"},
		{"lease", plain, leased, "3s"},
		{"default", plain, fence.NewGrant("idle-default", 1), "10s"},
		{"fence-first lease", fenceFirstStore(t, pool), leasedGrant{fence.NewGrant("idle-ff", 1), 4 * time.Second}, "4s"},
		{"set", plain, idleSet{fence.NewGrant("idle-set-a", 1), []string{"idle-set-a", "idle-set-b"}}, "10s"},
		{"set, option", opt, idleSet{fence.NewGrant("idle-set-c", 1), []string{"idle-set-c", "idle-set-d"}}, "1500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			err := fence.Exec(t.Context(), tt.store, tt.g, func(tx pgx.Tx) error {
				return tx.QueryRow(t.Context(), "SHOW idle_in_transaction_session_timeout").Scan(&got)
			})
			if err != nil || got != tt.want {
				t.Fatalf("idle timeout = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := pgxfence.New(pool, pgxfence.WithIdleTimeout(0)); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("WithIdleTimeout(0) = %v, want ErrInvalidOption", err)
	}
}
