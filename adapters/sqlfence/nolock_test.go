package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// noLockConns caps each test pool, so the suite's 1,000 buyers queue in the pool
// rather than exhaust the server's connection limit.
const noLockConns = 8

func noLockHarness(name string, db *sql.DB, d migrations.Dialect, store fencetest.NoLockStore[*sql.Tx]) fencetest.NoLockHarness[*sql.Tx] {
	rw := func(q string) string {
		if d == migrations.Postgres {
			return dollars(q)
		}
		return q
	}
	return fencetest.NoLockHarness[*sql.Tx]{
		Name:  name,
		Store: store,
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, rw(q), args...)
			return err
		},
		QueryInt: func(ctx context.Context, q string, args ...any) (int64, error) {
			return scanInt(ctx, db, rw(q), args...)
		},
		TxExec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, rw(q), args...)
			return err
		},
	}
}

// ph writes a test statement's ? placeholders the backend's way.
func ph(d migrations.Dialect, q string) string {
	if d == migrations.Postgres {
		return dollars(q)
	}
	return q
}

// nlExec and nlInt run a test statement written with ? placeholders on any backend.
func nlExec(t testing.TB, db *sql.DB, d migrations.Dialect, q string, args ...any) {
	t.Helper()
	if d == migrations.Postgres {
		q = dollars(q)
	}
	mustExec(t, db, q, args...)
}

func nlInt(t testing.TB, db *sql.DB, d migrations.Dialect, q string, args ...any) int64 {
	t.Helper()
	if d == migrations.Postgres {
		q = dollars(q)
	}
	return queryInt(t, db, q, args...)
}

// ago is the dialect's expression for the database's clock minus secs seconds.
func ago(d migrations.Dialect, secs int) string {
	switch d {
	case migrations.MySQL:
		return fmt.Sprintf("CURRENT_TIMESTAMP(6) - INTERVAL %d SECOND", secs)
	case migrations.Postgres:
		return fmt.Sprintf("now() - interval '%d seconds'", secs)
	}
	return fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '%+d seconds')", -secs)
}

// TestNoLock runs the shared no-lock suite (flash sale, wallet, second neo, retried
// payment, reused key, failing fn) on every backend with a pool of 8 connections;
// on MariaDB also under READ COMMITTED, on PostgreSQL under REPEATABLE READ (where a
// duplicate that waited meets a serialization failure and starts over), and with
// expiring keys on all.
func TestNoLock(t *testing.T) {
	for _, b := range backends {
		variants := []struct {
			name string
			opts []sqlfence.Option
			ttl  time.Duration
		}{
			{name: "default"},
			{name: "expiring keys", ttl: time.Hour},
		}
		switch b.d {
		case migrations.MySQL:
			variants = append(variants, struct {
				name string
				opts []sqlfence.Option
				ttl  time.Duration
			}{"read committed", []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{Isolation: sql.LevelReadCommitted})}, 0})
		case migrations.Postgres:
			variants = append(variants, struct {
				name string
				opts []sqlfence.Option
				ttl  time.Duration
			}{"repeatable read", []sqlfence.Option{sqlfence.WithTxOptions(sql.TxOptions{Isolation: sql.LevelRepeatableRead})}, 0})
		}
		for _, v := range variants {
			t.Run(b.name+"/"+v.name, func(t *testing.T) {
				db, _ := b.open(t)
				db.SetMaxOpenConns(noLockConns)
				opts := v.opts
				if v.ttl > 0 {
					opts = append(opts, sqlfence.WithKeyTTL(v.ttl))
				}
				s, err := sqlfence.New(db, b.d, opts...)
				if err != nil {
					t.Fatal(err)
				}
				fencetest.RunNoLock(t, noLockHarness(b.name+" "+v.name, db, b.d, s))
			})
		}
	}
}

func TestStore_Insert_constraintNamed(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		mustExec(t, db, "CREATE TABLE "+quote(d, "user`s\"")+" (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL)")
		mustExec(t, db, "CREATE UNIQUE INDEX users_name ON "+quote(d, "user`s\"")+" (name)")
		ctx := t.Context()
		if err := s.Insert(ctx, "user`s\"", fence.Col{Name: "id", Value: 1}, fence.Col{Name: "name", Value: "neo"}); err != nil {
			t.Fatal(err)
		}
		want := "users_name"
		if d == migrations.SQLite {
			want = "user`s\".name" // SQLite names the columns, not the index
		}
		var de *nolock.DuplicateError
		err := s.Insert(ctx, "user`s\"", fence.Col{Name: "id", Value: 2}, fence.Col{Name: "name", Value: "neo"})
		if !errors.As(err, &de) || de.Constraint != want || de.Table != "user`s\"" {
			t.Fatalf("second neo = %v (%+v), want a *nolock.DuplicateError on %s", err, de, want)
		}
		for _, cols := range [][]fence.Col{
			{fence.Col{Name: "id", Value: 3}, fence.Col{Name: "ID", Value: 4}},
			{},
		} {
			if err := s.Insert(ctx, "user`s\"", cols...); !errors.Is(err, fence.ErrInvalidArgument) {
				t.Errorf("Insert(%v) = %v, want ErrInvalidArgument", cols, err)
			}
		}
		if err := s.Insert(ctx, "a.b.c", fence.Col{Name: "id", Value: 5}); !fencetest.Match(err, fencetest.Invalid(`table name "a.b.c" has more than one dot`)) {
			t.Errorf("Insert into a.b.c = %v, want fence.ErrInvalidArgument for the two dots", err)
		}
	})
}

func TestStore_Decrement_quoting(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		tbl := "st`o\"ck; --"
		mustExec(t, db, "CREATE TABLE "+quote(d, tbl)+" ("+quote(d, "sku id")+" VARCHAR(20) PRIMARY KEY, "+quote(d, "left?")+" BIGINT NOT NULL)")
		mustExec(t, db, "INSERT INTO "+quote(d, tbl)+" VALUES ('a', 5)")
		c := nolock.Counter{Table: tbl, Key: []fence.Col{{Name: "sku id", Value: "a"}}, Column: "left?"}
		if left, err := s.Decrement(t.Context(), c, 2); err != nil || left != 3 {
			t.Fatalf("Decrement = %d, %v; want 3", left, err)
		}
		bad := []struct {
			name string
			c    nolock.Counter
			want error
		}{
			{"column is a key column", nolock.Counter{Table: tbl, Key: c.Key, Column: "SKU ID"}, fence.ErrInvalidArgument},
			{"key named twice", nolock.Counter{Table: tbl, Key: append(c.Key, fence.Col{Name: "sku id", Value: "b"}), Column: "left?"}, fence.ErrInvalidArgument},
			{"NUL in column", nolock.Counter{Table: tbl, Key: c.Key, Column: "le\x00ft"}, fencetest.Invalid("contains a NUL byte")},
		}
		for _, tt := range bad {
			if _, err := s.Decrement(t.Context(), tt.c, 1); !fencetest.Match(err, tt.want) {
				t.Errorf("%s: Decrement = %v, want %v", tt.name, err, tt.want)
			}
		}
		if got := queryInt(t, db, "SELECT "+quote(d, "left?")+" FROM "+quote(d, tbl)); got != 3 {
			t.Fatalf("left = %d after refused calls, want 3", got)
		}
	})
}

// TestStore_Once_firstRollsBack: duplicates that wait for the first call and then
// find it rolled back: one of them runs fn, the others replay its result. With
// several waiters InnoDB deadlocks all but one of them (each holds a shared lock on
// the key and wants the exclusive one); Once starts those over.
func TestStore_Once_firstRollsBack(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		ctx := t.Context()
		mustExec(t, db, "CREATE TABLE charges (id VARCHAR(20) PRIMARY KEY)")
		inFn, fail := make(chan struct{}), make(chan struct{})
		declined := errors.New("card declined")
		first := make(chan error, 1)
		go func() {
			_, err := s.Once(ctx, "pay-1", "amount=50", func(tx *sql.Tx) ([]byte, error) {
				if _, err := tx.ExecContext(ctx, ph(d, "INSERT INTO charges (id) VALUES (?)"), "first"); err != nil {
					return nil, err
				}
				close(inFn)
				<-fail
				return nil, declined
			})
			first <- err
		}()
		<-inFn
		const waiters = 5
		var (
			runs    atomic.Int64
			mu      sync.Mutex
			results []nolock.Result
			wg      sync.WaitGroup
		)
		for range waiters {
			wg.Go(func() {
				r, err := s.Once(ctx, "pay-1", "amount=50", func(tx *sql.Tx) ([]byte, error) {
					n := runs.Add(1)
					_, err := tx.ExecContext(ctx, ph(d, "INSERT INTO charges (id) VALUES (?)"), fmt.Sprintf("run-%d", n))
					return fmt.Appendf(nil, "receipt-%d", n), err
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("waiting call: %v", err)
					return
				}
				results = append(results, r)
			})
		}
		waitForKeyWait(t, db, d, waiters)
		close(fail)
		if err := <-first; !errors.Is(err, declined) {
			t.Fatalf("first call = %v, want its fn's error", err)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		fresh := 0
		for _, r := range results {
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
		if n := queryInt(t, db, "SELECT COUNT(*) FROM charges"); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
}

// waitForKeyWait returns once n other sessions wait on a lock: the duplicates'
// claims waiting on the first call's uncommitted key. SQLite shows no waiters (they
// sleep in their busy handlers), so there it returns at once and some calls may
// start only after the first rolled back; the outcome must be the same.
func waitForKeyWait(t *testing.T, db *sql.DB, d migrations.Dialect, n int64) {
	t.Helper()
	var q string
	switch d {
	case migrations.MySQL:
		// INNODB_TRX is a cache refreshed on its own schedule and may miss the wait;
		// the process list shows a claim while it runs, and it runs only while it
		// waits (the first call's claim finished before its fn began).
		q = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO idempotency_keys%'"
	case migrations.Postgres:
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
	default:
		return
	}
	for queryInt(t, db, q) < n {
		select {
		case <-t.Context().Done():
			t.Fatalf("fewer than %d sessions ever waited on the key", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestWithKeyTTL_Once(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		ctx := t.Context()
		keys, err := sqlfence.New(db, d, sqlfence.WithKeyTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		work := func(*sql.Tx) ([]byte, error) { return fmt.Appendf(nil, "run-%d", runs.Add(1)), nil }
		if r, err := keys.Once(ctx, "k1", "fp", work); err != nil || r.Replayed {
			t.Fatalf("first call = %+v, %v", r, err)
		}
		// Stored an hour ahead by the database's clock, give or take a minute.
		if n := nlInt(t, db, d, "SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'k1' AND expires_at > "+ago(d, -59*60)+" AND expires_at < "+ago(d, -61*60)); n != 1 {
			t.Fatal("expires_at is not an hour after the insert")
		}
		if r, err := keys.Once(ctx, "k1", "fp", work); err != nil || !r.Replayed || string(r.Value) != "run-1" {
			t.Fatalf("replay = %+v, %v; want run-1 replayed", r, err)
		}
		// Expired: it counts as absent, even for another request.
		mustExec(t, db, "UPDATE idempotency_keys SET expires_at = "+ago(d, 1)+" WHERE idem_key = 'k1'")
		if r, err := keys.Once(ctx, "k1", "other request", work); err != nil || r.Replayed || string(r.Value) != "run-2" {
			t.Fatalf("call after expiry = %+v, %v; want a fresh run-2", r, err)
		}
		if _, err := keys.Once(ctx, "k1", "fp", work); !errors.Is(err, nolock.ErrKeyReused) {
			t.Fatalf("the old request after replacement = %v; want ErrKeyReused", err)
		}
		// Without WithKeyTTL no expiry is stored.
		if _, err := s.Once(ctx, "k2", "fp", work); err != nil {
			t.Fatal(err)
		}
		if n := queryInt(t, db, "SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'k2' AND expires_at IS NULL"); n != 1 {
			t.Fatal("a Store without WithKeyTTL stored an expiry")
		}
		for _, ttl := range []time.Duration{0, -time.Second, time.Nanosecond} {
			if _, err := sqlfence.New(db, d, sqlfence.WithKeyTTL(ttl)); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithKeyTTL") {
				t.Errorf("WithKeyTTL(%v) = %v, want ErrInvalidArgument naming the option", ttl, err)
			}
		}
	})
}

// TestWithKeyTTL_concurrentReplace: 20 concurrent calls on one expired key run fn
// once between them, and all get that run's result.
func TestWithKeyTTL_concurrentReplace(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		db.SetMaxOpenConns(noLockConns)
		keys, err := sqlfence.New(db, s.Dialect(), sqlfence.WithKeyTTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, "INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at) VALUES ('k', 'old', "+ago(s.Dialect(), 3600)+")")
		var (
			runs    atomic.Int64
			mu      sync.Mutex
			results = map[string]int{}
			fresh   int
			wg      sync.WaitGroup
		)
		release := make(chan struct{})
		for range 20 {
			wg.Go(func() {
				<-release
				r, err := keys.Once(t.Context(), "k", "new", func(*sql.Tx) ([]byte, error) {
					return fmt.Appendf(nil, "run-%d", runs.Add(1)), nil
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("Once: %v", err)
					return
				}
				results[string(r.Value)]++
				if !r.Replayed {
					fresh++
				}
			})
		}
		close(release)
		wg.Wait()
		if runs.Load() != 1 || fresh != 1 || results["run-1"] != 20 {
			t.Fatalf("fn ran %d times, %d fresh results, results %v; want 1, 1 and run-1 for all 20", runs.Load(), fresh, results)
		}
	})
}

func TestStore_PurgeExpiredKeys(t *testing.T) {
	forEach(t, func(t *testing.T, db *sql.DB, s *sqlfence.Store) {
		d := s.Dialect()
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for batch := range 5 {
			vals := make([]string, 500)
			for i := range vals {
				vals[i] = fmt.Sprintf("('old-%d-%d', 'fp', %s)", batch, i, ago(d, 60))
			}
			if _, err := tx.ExecContext(t.Context(), "INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at) VALUES "+strings.Join(vals, ", ")); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, "INSERT INTO idempotency_keys (idem_key, fingerprint, expires_at) VALUES ('live', 'fp', "+ago(d, -3600)+"), ('forever', 'fp', NULL)")
		n, err := s.PurgeExpiredKeys(t.Context())
		if err != nil || n != 2500 {
			t.Fatalf("PurgeExpiredKeys = %d, %v; want 2500", n, err)
		}
		if left := queryInt(t, db, "SELECT COUNT(*) FROM idempotency_keys"); left != 2 {
			t.Fatalf("%d keys left, want the live and the everlasting one", left)
		}
		if n, err := s.PurgeExpiredKeys(t.Context()); err != nil || n != 0 {
			t.Fatalf("second purge = %d, %v; want 0", n, err)
		}
	})
}

func TestStore_Once_badInput(t *testing.T) {
	db, _ := sqliteDB(t)
	s := newStore(db, migrations.SQLite)
	ok := func(*sql.Tx) ([]byte, error) { return nil, nil }
	tests := []struct {
		name, key, fp string
		fn            func(*sql.Tx) ([]byte, error)
		want          error
	}{
		{"empty key", "", "fp", ok, fence.ErrInvalidArgument},
		{"long key", strings.Repeat("k", nolock.MaxKeyLen+1), "fp", ok, fence.ErrInvalidArgument},
		{"key not UTF-8", "k\xff", "fp", ok, fence.ErrInvalidArgument},
		{"NUL in key", "k\x00", "fp", ok, fence.ErrInvalidArgument},
		{"long fingerprint", "k", strings.Repeat("f", 256), ok, fence.ErrInvalidArgument},
		{"nil fn", "k", "fp", nil, fence.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Once(t.Context(), tt.key, tt.fp, tt.fn); !errors.Is(err, tt.want) {
				t.Fatalf("Once = %v, want %v", err, tt.want)
			}
		})
	}
	if n := queryInt(t, db, "SELECT COUNT(*) FROM idempotency_keys"); n != 0 {
		t.Fatalf("%d keys stored by refused calls", n)
	}
	// Without the migrations: ErrSchema names the fix.
	mustExec(t, db, "DROP TABLE idempotency_keys")
	if _, err := s.Once(t.Context(), "k", "fp", ok); !errors.Is(err, fence.ErrSchema) {
		t.Fatalf("Once without idempotency_keys = %v, want ErrSchema", err)
	}
}

// exampleDB opens a migrated SQLite file for the examples.
func exampleDB(ctx context.Context) (*sql.DB, func()) {
	dir, _ := os.MkdirTemp("", "sqlfence-example")
	db, err := sqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// A flash sale needs no lock: the guarded decrement takes an item only if one is
// left, in one statement.
func ExampleStore_Decrement() {
	ctx := context.Background()
	db, done := exampleDB(ctx)
	defer done()
	db.ExecContext(ctx, `CREATE TABLE stock (sku TEXT PRIMARY KEY, items_left INTEGER NOT NULL)`)
	db.ExecContext(ctx, `INSERT INTO stock VALUES ('sku-42', 2)`)

	store := newStore(db, migrations.SQLite)
	item := nolock.Counter{Table: "stock", Key: []fence.Col{{Name: "sku", Value: "sku-42"}}, Column: "items_left"}
	for buyer := 1; buyer <= 3; buyer++ {
		left, err := store.Decrement(ctx, item, 1)
		switch {
		case errors.Is(err, nolock.ErrInsufficient):
			fmt.Printf("buyer %d: sold out (%v)\n", buyer, err)
		case err != nil:
			panic(err)
		default:
			fmt.Printf("buyer %d: bought one, %d left\n", buyer, left)
		}
	}
	// Output:
	// buyer 1: bought one, 1 left
	// buyer 2: bought one, 0 left
	// buyer 3: sold out (nolock: insufficient in "stock": wanted 1, 0 left)
}

// A retried payment is charged once: the retry gets the first call's receipt back.
func ExampleStore_Once() {
	ctx := context.Background()
	db, done := exampleDB(ctx)
	defer done()
	db.ExecContext(ctx, `CREATE TABLE charges (payment_key TEXT NOT NULL, cents INTEGER NOT NULL)`)

	store := newStore(db, migrations.SQLite)
	pay := func(fingerprint string) {
		r, err := store.Once(ctx, "checkout-7", fingerprint, func(tx *sql.Tx) ([]byte, error) {
			_, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES ('checkout-7', 5000)`)
			return []byte("receipt: $50.00 charged"), err
		})
		fmt.Printf("%q replayed=%v err=%v\n", r.Value, r.Replayed, err)
	}
	pay("amount=5000")
	pay("amount=5000") // the client timed out and sent it again
	pay("amount=7500") // the same key for another request

	var n int
	db.QueryRowContext(ctx, `SELECT COUNT(*) FROM charges`).Scan(&n)
	fmt.Println("charges:", n)
	// Output:
	// "receipt: $50.00 charged" replayed=false err=<nil>
	// "receipt: $50.00 charged" replayed=true err=<nil>
	// "" replayed=false err=nolock: idempotency key reused with a different request: key "checkout-7"
	// charges: 1
}
