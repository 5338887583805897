package pgxfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

// waitForLockWaiters polls until n backends of this database wait on a lock: a
// transaction has reached the fence row and is blocked on it.
func waitForLockWaiters(t *testing.T, pool *pgxpool.Pool, n int64) {
	t.Helper()
	for {
		got := mustInt(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
		if got >= n {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("no transaction ever waited on the fence row")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestStore_Fenced_isolation holds a transaction with token 41 open on the fence row
// while a stale one (40) and a newer one (42) arrive, at each isolation level, with
// the fence raised before fn (WithFenceFirst) and with fn's first statement (the
// default: the holder has sent its first statement when the others come).
func TestStore_Fenced_isolation(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	for _, pipelined := range []bool{false, true} {
		for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
			name := strings.ReplaceAll(string(iso), " ", "_")
			if pipelined {
				name = "pipelined/" + name
			}
			t.Run(name, func(t *testing.T) { testIsolation(t, pool, iso, pipelined) })
		}
	}
}

func testIsolation(t *testing.T, pool *pgxpool.Pool, iso pgx.TxIsoLevel, pipelined bool) {
	opts := []pgxfence.Option{pgxfence.WithTxOptions(pgx.TxOptions{IsoLevel: iso})}
	if !pipelined {
		opts = append(opts, pgxfence.WithFenceFirst())
	}
	s, err := pgxfence.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	res := fmt.Sprintf("iso/%s/%v", iso, pipelined)
	// The level really is in force inside fn.
	err = s.Fenced(t.Context(), fence.NewGrant(res, 1), func(tx pgx.Tx) error {
		var got string
		if err := tx.QueryRow(t.Context(), "SHOW transaction_isolation").Scan(&got); err != nil {
			return err
		}
		if got != string(iso) {
			return fmt.Errorf("transaction_isolation = %q, want %q", got, iso)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, late := range []fence.Token{40, 42} {
		res := fmt.Sprintf("%s/%d", res, late)
		if err := invoice(s, res, 1, 0); err != nil { // both meet on an existing fence row
			t.Fatal(err)
		}
		inside, finish := make(chan struct{}), make(chan struct{})
		holder := make(chan error, 1)
		go func() {
			holder <- s.Fenced(context.Background(), fence.NewGrant(res, 41), func(tx pgx.Tx) error {
				if pipelined {
					// The fence is raised with the first statement.
					if _, err := tx.Exec(context.Background(), "SELECT 1"); err != nil {
						return err
					}
				}
				close(inside)
				<-finish
				_, err := tx.Exec(context.Background(), "UPDATE invoices SET total = 41, written_by = 41 WHERE account = 42")
				return err
			})
		}()
		<-inside
		arrived := make(chan error, 1)
		go func() { arrived <- invoice(s, res, late, int64(late)) }()
		waitForLockWaiters(t, pool, 1)
		close(finish)
		if err := <-holder; err != nil {
			t.Fatalf("holder 41: %v", err)
		}
		err := <-arrived
		switch {
		case late == 40:
			wantStale(t, err, 40, 41)
		case iso == pgx.ReadCommitted:
			if err != nil {
				t.Fatalf("token 42 after 41 under READ COMMITTED: %v", err)
			}
		default:
			var pgErr *pgconn.PgError
			if !errors.Is(err, fence.ErrBusy) || !errors.As(err, &pgErr) || pgErr.Code != "40001" {
				t.Fatalf("token 42 racing 41 under %s = %v, want fence.ErrBusy wrapping 40001", iso, err)
			}
			if err := invoice(s, res, late, int64(late)); err != nil {
				t.Fatalf("retry of token 42: %v", err)
			}
		}
		want := max(late, 41)
		if got := mustInt(t, pool, "SELECT written_by FROM invoices WHERE account = 42"); got != int64(want) {
			t.Fatalf("written_by = %d, want %d", got, want)
		}
		if got := stored(t, pool, res); got != want {
			t.Fatalf("stored token = %d, want %d", got, want)
		}
	}
}

// TestStore_Fenced_serializableCommitFailure makes a SERIALIZABLE write skew between
// two fenced transactions on different resources: the second to commit fails at
// COMMIT with 40001, which Fenced returns as fence.ErrBusy (its grant is current).
func TestStore_Fenced_serializableCommitFailure(t *testing.T) {
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE oncall (doctor TEXT PRIMARY KEY, on_duty BOOLEAN NOT NULL)")
	mustExec(t, pool, "INSERT INTO oncall VALUES ('alice', true), ('bob', true)")
	s, err := pgxfence.New(pool, pgxfence.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Each takes itself off duty if the other is on duty: serially, one would see the
	// other already off and stay.
	goOff := func(me, other string, wrote chan<- struct{}, commit <-chan struct{}) error {
		return s.Fenced(ctx, fence.NewGrant("doctor-"+me, 1), func(tx pgx.Tx) error {
			var onDuty bool
			if err := tx.QueryRow(ctx, "SELECT on_duty FROM oncall WHERE doctor = $1", other).Scan(&onDuty); err != nil {
				return err
			}
			if onDuty {
				if _, err := tx.Exec(ctx, "UPDATE oncall SET on_duty = false WHERE doctor = $1", me); err != nil {
					return err
				}
			}
			close(wrote)
			<-commit
			return nil
		})
	}
	aliceWrote, bobWrote := make(chan struct{}), make(chan struct{})
	aliceCommit, bobCommit := make(chan struct{}), make(chan struct{})
	alice, bob := make(chan error, 1), make(chan error, 1)
	go func() { alice <- goOff("alice", "bob", aliceWrote, aliceCommit) }()
	go func() { bob <- goOff("bob", "alice", bobWrote, bobCommit) }()
	<-aliceWrote
	<-bobWrote
	close(aliceCommit)
	if err := <-alice; err != nil {
		t.Fatalf("first to commit: %v", err)
	}
	close(bobCommit)
	err = <-bob
	var pgErr *pgconn.PgError
	if !errors.Is(err, fence.ErrBusy) || !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("second to commit = %v, want fence.ErrBusy wrapping 40001", err)
	}
	if got := mustInt(t, pool, "SELECT count(*) FROM oncall WHERE on_duty"); got != 1 {
		t.Fatalf("%d doctors on duty, want 1", got)
	}
	if got := stored(t, pool, "doctor-bob"); got != 0 {
		t.Fatalf("the failed transaction's fence raise stayed: %d", got)
	}
}
