package pgxfence_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/nolock"
)

func noLockHarness(name string, pool *pgxpool.Pool, store fencetest.NoLockStore[pgx.Tx]) fencetest.NoLockHarness[pgx.Tx] {
	exec, query := onPool(pool)
	return fencetest.NoLockHarness[pgx.Tx]{
		Name:     name,
		Store:    store,
		Exec:     exec,
		QueryInt: query,
		TxExec:   suiteExec[pgx.Tx],
	}
}

// TestNoLock runs the shared no-lock suite (flash sale, wallet, second neo, retried
// payment, reused key, failing fn) on a pool of 8 connections, so 1,000 buyers queue
// in the pool; then again under REPEATABLE READ, where a duplicate that waited meets
// a serialization failure and starts over, and with expiring keys.
func TestNoLock(t *testing.T) {
	t.Run("read committed", func(t *testing.T) {
		pool := newPool(t)
		fencetest.RunNoLock(t, noLockHarness("pgxfence", pool, newStore(pool)))
	})
	t.Run("repeatable read", func(t *testing.T) {
		pool := newPool(t)
		s, err := pgxfence.New(pool, pgxfence.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.RepeatableRead}))
		if err != nil {
			t.Fatal(err)
		}
		fencetest.RunNoLock(t, noLockHarness("pgxfence repeatable read", pool, s))
	})
	t.Run("expiring keys", func(t *testing.T) {
		pool := newPool(t)
		s, err := pgxfence.New(pool, pgxfence.WithKeyTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		fencetest.RunNoLock(t, noLockHarness("pgxfence expiring keys", pool, s))
	})
}

func TestStore_Decrement_quoting(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	mustExec(t, pool, `CREATE SCHEMA "shop; DROP"`)
	mustExec(t, pool, `CREATE TABLE "shop; DROP"."stock ""x""" ("sku id" TEXT, "left" INT NOT NULL, PRIMARY KEY ("sku id"))`)
	mustExec(t, pool, `INSERT INTO "shop; DROP"."stock ""x""" VALUES ('a', 5)`)
	c := nolock.Counter{Table: `shop; DROP.stock "x"`, Key: []fence.Col{{Name: "sku id", Value: "a"}}, Column: "left"}
	left, err := s.Decrement(t.Context(), c, 2)
	if err != nil || left != 3 {
		t.Fatalf("Decrement = %d, %v; want 3", left, err)
	}
	bad := []struct {
		name string
		c    nolock.Counter
		want error
	}{
		{"column is a key column", nolock.Counter{Table: c.Table, Key: c.Key, Column: "sku id"}, fence.ErrInvalidArgument},
		{"three-part table", nolock.Counter{Table: "a.b.c", Key: c.Key, Column: "left"}, fencetest.Invalid(`table name "a.b.c" has more than one dot`)},
		{"NUL in column", nolock.Counter{Table: c.Table, Key: c.Key, Column: "le\x00ft"}, fencetest.Invalid("contains a NUL byte")},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Decrement(t.Context(), tt.c, 1); !fencetest.Match(err, tt.want) {
				t.Fatalf("Decrement = %v, want %v", err, tt.want)
			}
		})
	}
	if got := mustInt(t, pool, `SELECT "left" FROM "shop; DROP"."stock ""x"""`); got != 3 {
		t.Fatalf("left = %d after refused calls, want 3", got)
	}
}

func TestStore_Insert_duplicate(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	mustExec(t, pool, `CREATE TABLE users (id INT PRIMARY KEY, name TEXT NOT NULL, CONSTRAINT users_name_key UNIQUE (name))`)
	ctx := t.Context()
	if err := s.Insert(ctx, "users", fence.Col{Name: "id", Value: 1}, fence.Col{Name: "name", Value: "neo"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		cols       []fence.Col
		constraint string
	}{
		{"same name", []fence.Col{{Name: "id", Value: 2}, {Name: "name", Value: "neo"}}, "users_name_key"},
		{"same id", []fence.Col{{Name: "id", Value: 1}, {Name: "name", Value: "trinity"}}, "users_pkey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var de *nolock.DuplicateError
			err := s.Insert(ctx, "users", tt.cols...)
			if !errors.As(err, &de) || de.Constraint != tt.constraint || de.Table != "users" {
				t.Fatalf("Insert = %v, want a *nolock.DuplicateError on %s", err, tt.constraint)
			}
		})
	}
	if err := s.Insert(ctx, "users", fence.Col{Name: "id", Value: 3}, fence.Col{Name: "id", Value: 4}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("Insert naming id twice = %v, want ErrInvalidArgument", err)
	}
}

// TestStore_Once_firstRollsBack: duplicates that wait on the first call's key and
// then find it rolled back: one of them runs fn, the others replay its result.
func TestStore_Once_firstRollsBack(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	ctx := t.Context()
	mustExec(t, pool, "CREATE TABLE charges (id BIGSERIAL PRIMARY KEY, idem_key TEXT NOT NULL)")
	const key = "pay-rollback"
	inFn, fail := make(chan struct{}), make(chan struct{})
	declined := errors.New("card declined")
	first := make(chan error, 1)
	go func() {
		_, err := s.Once(ctx, key, "amount=50", func(tx pgx.Tx) ([]byte, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO charges (idem_key) VALUES ($1)", key); err != nil {
				return nil, err
			}
			close(inFn)
			<-fail
			return nil, declined
		})
		first <- err
	}()
	<-inFn
	// Five duplicates wait on the first call's key (the pool has 8 connections).
	const waiters = 5
	var (
		runs    atomic.Int64
		results = make(chan nolock.Result, waiters)
		wg      sync.WaitGroup
	)
	for range waiters {
		wg.Go(func() {
			r, err := s.Once(ctx, key, "amount=50", func(tx pgx.Tx) ([]byte, error) {
				n := runs.Add(1)
				_, err := tx.Exec(ctx, "INSERT INTO charges (idem_key) VALUES ($1)", key)
				return fmt.Appendf(nil, "receipt-%d", n), err
			})
			if err != nil {
				t.Errorf("waiting call: %v", err)
				return
			}
			results <- r
		})
	}
	waitForLockWait(t, pool, waiters)
	close(fail)
	if err := <-first; !errors.Is(err, declined) {
		t.Fatalf("first call = %v, want its fn's error", err)
	}
	wg.Wait()
	close(results)
	fresh := 0
	for r := range results {
		if !r.Replayed {
			fresh++
		}
		if string(r.Value) != "receipt-1" {
			t.Errorf("result %q, want receipt-1", r.Value)
		}
	}
	if runs.Load() != 1 || fresh != 1 {
		t.Fatalf("fn ran %d times, %d fresh results; want 1 and 1", runs.Load(), fresh)
	}
	if n := mustInt(t, pool, "SELECT count(*) FROM charges"); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// waitForLockWait returns once n other sessions of this database wait on a lock
// (the duplicates' claims waiting on the first call's uncommitted key).
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, n int64) {
	t.Helper()
	for {
		if mustInt(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") >= n {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatal("no session ever waited on the key")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestWithKeyTTL_Once(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	ctx := t.Context()
	keys, err := pgxfence.New(pool, pgxfence.WithKeyTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	work := func(pgx.Tx) ([]byte, error) { return fmt.Appendf(nil, "run-%d", runs.Add(1)), nil }

	if r, err := keys.Once(ctx, "k1", "fp", work); err != nil || r.Replayed {
		t.Fatalf("first call = %+v, %v", r, err)
	}
	if ok := mustInt(t, pool, "SELECT count(*) FROM idempotency_keys WHERE idem_key = 'k1' AND expires_at BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'"); ok != 1 {
		t.Fatal("expires_at is not an hour after the insert")
	}
	if r, err := keys.Once(ctx, "k1", "fp", work); err != nil || !r.Replayed || string(r.Value) != "run-1" {
		t.Fatalf("replay = %+v, %v; want run-1 replayed", r, err)
	}
	// Expired: it counts as absent, even for another request.
	mustExec(t, pool, "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' WHERE idem_key = 'k1'")
	if r, err := keys.Once(ctx, "k1", "other request", work); err != nil || r.Replayed || string(r.Value) != "run-2" {
		t.Fatalf("call after expiry = %+v, %v; want a fresh run-2", r, err)
	}
	if r, err := keys.Once(ctx, "k1", "fp", work); !errors.Is(err, nolock.ErrKeyReused) {
		t.Fatalf("old request after replacement = %+v, %v; want ErrKeyReused", r, err)
	}
	// Without WithKeyTTL keys never expire.
	if _, err := s.Once(ctx, "k2", "fp", work); err != nil {
		t.Fatal(err)
	}
	if n := mustInt(t, pool, "SELECT count(*) FROM idempotency_keys WHERE idem_key = 'k2' AND expires_at IS NULL"); n != 1 {
		t.Fatal("a Store without WithKeyTTL stored an expiry")
	}

	for _, ttl := range []time.Duration{0, -time.Second, time.Nanosecond} {
		if _, err := pgxfence.New(pool, pgxfence.WithKeyTTL(ttl)); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithKeyTTL") {
			t.Errorf("WithKeyTTL(%v) = %v, want ErrInvalidArgument naming the option", ttl, err)
		}
	}
}

// TestWithKeyTTL_concurrentReplace: 20 concurrent calls on one expired key run fn
// once between them.
func TestWithKeyTTL_concurrentReplace(t *testing.T) {
	pool := newPool(t)
	keys, err := pgxfence.New(pool, pgxfence.WithKeyTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, "INSERT INTO idempotency_keys (idem_key, fingerprint, result, expires_at) VALUES ('k', 'old', 'old', now() - interval '1 hour')")
	var runs atomic.Int64
	results := make(chan nolock.Result, 20)
	release := make(chan struct{})
	done := make(chan struct{})
	for range 20 {
		go func() {
			defer func() { done <- struct{}{} }()
			<-release
			r, err := keys.Once(t.Context(), "k", "new", func(pgx.Tx) ([]byte, error) {
				return fmt.Appendf(nil, "run-%d", runs.Add(1)), nil
			})
			if err != nil {
				t.Errorf("Once: %v", err)
				return
			}
			results <- r
		}()
	}
	close(release)
	for range 20 {
		<-done
	}
	close(results)
	fresh := 0
	for r := range results {
		if !r.Replayed {
			fresh++
		}
		if string(r.Value) != "run-1" {
			t.Errorf("result %q, want run-1", r.Value)
		}
	}
	if runs.Load() != 1 || fresh != 1 {
		t.Fatalf("fn ran %d times, %d fresh results; want 1 and 1", runs.Load(), fresh)
	}
}

// TestStore_Once_results: results of any bytes, empty and nil come back from a replay
// as they were stored, on a pool and on a single connection.
func TestStore_Once_results(t *testing.T) {
	pool := newPool(t)
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	stores := map[string]*pgxfence.Store{"pool": newStore(pool), "conn": newStore(conn.Conn())}
	for name, s := range stores {
		for i, want := range [][]byte{{0, 0xff, '\\', '\'', 'x'}, {}, nil} {
			key := fmt.Sprintf("%s-%d", name, i)
			if _, err := s.Once(t.Context(), key, "fp", func(pgx.Tx) ([]byte, error) { return want, nil }); err != nil {
				t.Fatal(err)
			}
			r, err := s.Once(t.Context(), key, "fp", func(pgx.Tx) ([]byte, error) { return nil, errors.New("ran again") })
			if err != nil || !r.Replayed || string(r.Value) != string(want) || (want == nil) != (r.Value == nil) {
				t.Errorf("%s: replay of %q = %+v, %v", name, want, r, err)
			}
		}
	}
	// Keys and fingerprints with quotes and backslashes are parameters like any value.
	s := newStore(pool)
	for _, key := range []string{`it's`, `back\slash`, `E'x'`, "naïve ✓"} {
		if _, err := s.Once(t.Context(), key, key, func(pgx.Tx) ([]byte, error) { return []byte(key), nil }); err != nil {
			t.Fatalf("Once(%q): %v", key, err)
		}
		if r, err := s.Once(t.Context(), key, key, func(pgx.Tx) ([]byte, error) { return nil, nil }); err != nil || !r.Replayed || string(r.Value) != key {
			t.Fatalf("replay of %q = %+v, %v", key, r, err)
		}
		if _, err := s.Once(t.Context(), key, key+"'", func(pgx.Tx) ([]byte, error) { return nil, nil }); !errors.Is(err, nolock.ErrKeyReused) {
			t.Fatalf("Once(%q) with another fingerprint = %v", key, err)
		}
	}
}

func TestStore_PurgeExpiredKeys(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	ctx := t.Context()
	mustExec(t, pool, `INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at)
		SELECT 'old-' || i, 'fp', now() - interval '1 minute' FROM generate_series(1, 2500) AS i`)
	mustExec(t, pool, `INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at) VALUES
		('live', 'fp', now() + interval '1 hour'), ('forever', 'fp', NULL)`)
	n, err := s.PurgeExpiredKeys(ctx)
	if err != nil || n != 2500 {
		t.Fatalf("PurgeExpiredKeys = %d, %v; want 2500", n, err)
	}
	if left := mustInt(t, pool, "SELECT count(*) FROM idempotency_keys"); left != 2 {
		t.Fatalf("%d keys left, want the live and the everlasting one", left)
	}
	if n, err := s.PurgeExpiredKeys(ctx); err != nil || n != 0 {
		t.Fatalf("second purge = %d, %v; want 0", n, err)
	}
}

func TestStore_Once_badInput(t *testing.T) {
	pool := newPool(t)
	s := newStore(pool)
	ok := func(pgx.Tx) ([]byte, error) { return nil, nil }
	tests := []struct {
		name, key, fp string
		fn            func(pgx.Tx) ([]byte, error)
	}{
		{"empty key", "", "fp", ok},
		{"long key", strings.Repeat("k", nolock.MaxKeyLen+1), "fp", ok},
		{"key not UTF-8", "k\xff", "fp", ok},
		{"NUL in key", "k\x00", "fp", ok},
		{"long fingerprint", "k", fmt.Sprintf("%0256d", 0), ok},
		{"nil fn", "k", "fp", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Once(t.Context(), tt.key, tt.fp, tt.fn); !errors.Is(err, fence.ErrInvalidArgument) {
				t.Fatalf("Once = %v, want ErrInvalidArgument", err)
			}
		})
	}
	if n := mustInt(t, pool, "SELECT count(*) FROM idempotency_keys"); n != 0 {
		t.Fatalf("%d keys stored by refused calls", n)
	}
	// Without the migrations: ErrSchema names the fix.
	mustExec(t, pool, "DROP TABLE idempotency_keys")
	if _, err := s.Once(t.Context(), "k", "fp", ok); !errors.Is(err, fence.ErrSchema) {
		t.Fatalf("Once without idempotency_keys = %v, want ErrSchema", err)
	}
}

// TestStore_Once_callerTx: on a Store over the caller's transaction, Once is a
// savepoint: a failing fn rolls back to it and leaves the caller's earlier work.
func TestStore_Once_callerTx(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	mustExec(t, pool, "CREATE TABLE log (msg TEXT NOT NULL)")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mustExec(t, tx, "INSERT INTO log VALUES ('before')")
	s := newStore(tx)
	boom := errors.New("boom")
	if _, err := s.Once(ctx, "k", "fp", func(tx pgx.Tx) ([]byte, error) {
		mustExec(t, tx, "INSERT INTO log VALUES ('inside')")
		return nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Once = %v, want boom", err)
	}
	if r, err := s.Once(ctx, "k", "fp", func(tx pgx.Tx) ([]byte, error) { return []byte("ok"), nil }); err != nil || r.Replayed {
		t.Fatalf("Once = %+v, %v", r, err)
	}
	// Inside the same transaction the key is stored: a replay, from a savepoint.
	if r, err := s.Once(ctx, "k", "fp", func(tx pgx.Tx) ([]byte, error) { return nil, boom }); err != nil || !r.Replayed || string(r.Value) != "ok" {
		t.Fatalf("replay inside the caller's transaction = %+v, %v", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := mustInt(t, pool, "SELECT count(*) FROM log"); n != 1 {
		t.Fatalf("%d log rows, want only the caller's", n)
	}
	if r, err := newStore(pool).Once(ctx, "k", "fp", func(pgx.Tx) ([]byte, error) { return nil, boom }); err != nil || !r.Replayed || string(r.Value) != "ok" {
		t.Fatalf("replay after the caller committed = %+v, %v", r, err)
	}
}
