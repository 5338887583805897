package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// mariaPools are the two ways a MariaDB pool reaches a Store: mysql.Open (the
// one-statement begin) and the driver opened by hand with the two flags (a pinned
// connection whose session timeout is set and restored around the transaction).
func mariaPools(t *testing.T) map[string]*sql.DB {
	t.Helper()
	db, dsn := mysqlDB(t)
	return map[string]*sql.DB{"mysql.Open": db, "sql.Open": openRaw(t, dsn, true, true)}
}

// TestStore_Fenced_idleTimeoutRestored checks that MariaDB's session idle timeout,
// set for a fenced transaction, is what the transaction sees (WithIdleTimeout) and is
// back to the server's default when the connection returns to the pool, however the
// transaction ended: committed, rolled back after fn's error or panic or when ctx
// ended inside fn, or refused.
func TestStore_Fenced_idleTimeoutRestored(t *testing.T) {
	errFn := errors.New("fn failed")
	ends := []struct {
		name  string
		token fence.Token
		fn    func(cancel context.CancelFunc) error
		want  error
	}{
		{"commit", 5, func(context.CancelFunc) error { return nil }, nil},
		{"fn error", 5, func(context.CancelFunc) error { return errFn }, errFn},
		{"fn panic", 5, func(context.CancelFunc) error { panic("fn panicked") }, nil},
		{"ctx cancelled", 5, func(cancel context.CancelFunc) error { cancel(); return errFn }, context.Canceled},
		{"stale", 4, nil, fence.ErrStale},
	}
	for name, db := range mariaPools(t) {
		db.SetMaxOpenConns(1) // one connection: the fenced one is the one read after
		store, err := sqlfence.New(db, migrations.MySQL, sqlfence.WithIdleTimeout(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ends {
			t.Run(name+"/"+e.name, func(t *testing.T) {
				var inside int64
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				err := fencedRecover(ctx, store, fence.NewGrant("restore-"+name, e.token), func(tx *sql.Tx) error {
					if err := tx.QueryRowContext(ctx, "SELECT @@SESSION.idle_transaction_timeout").Scan(&inside); err != nil {
						return err
					}
					return e.fn(cancel)
				})
				if e.want == context.Canceled {
					// The transaction ended on ctx: fn's error or ctx's, never a commit.
					e.want = errFn
					if errors.Is(err, context.Canceled) {
						e.want = context.Canceled
					}
				}
				if !errors.Is(err, e.want) {
					t.Fatalf("Exec = %v, want %v", err, e.want)
				}
				if e.fn != nil && inside != 2 {
					t.Fatalf("idle_transaction_timeout inside = %d, want 2 (1.5 s rounded up)", inside)
				}
				if got := queryInt(t, db, "SELECT @@SESSION.idle_transaction_timeout = @@GLOBAL.idle_transaction_timeout"); got != 1 {
					t.Fatal("the pooled connection kept the fenced transaction's idle timeout")
				}
				if got := queryInt(t, db, "SELECT @@in_transaction"); got != 0 {
					t.Fatal("the pooled connection is still in a transaction")
				}
			})
		}
	}
	db, _ := mysqlDB(t)
	if _, err := sqlfence.New(db, migrations.MySQL, sqlfence.WithIdleTimeout(0)); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("WithIdleTimeout(0) = %v, want ErrInvalidOption", err)
	}
}

// fencedRecover runs fence.Exec, turning a panic out of it into a nil error.
func fencedRecover(ctx context.Context, s *sqlfence.Store, g fence.Grant, fn func(*sql.Tx) error) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	return fence.Exec(ctx, s, g, fn)
}

// TestStore_Fenced_roundTrips counts the statements a one-write fenced transaction
// sends MariaDB (the session's Questions counter, which counts a compound statement
// once): through a mysql.Open pool as many as the unfenced transaction, three.
func TestStore_Fenced_roundTrips(t *testing.T) {
	db, _ := mysqlDB(t)
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE rt (id INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	store := newStore(db, migrations.MySQL)
	write := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(t.Context(), "INSERT INTO rt (id, v) VALUES (1, 1) ON DUPLICATE KEY UPDATE v = v + 1")
		return err
	}
	// Warm up: the Store's connection check and the fence row's first insert.
	if err := fence.Exec(t.Context(), store, fence.NewGrant("rt", 1), write); err != nil {
		t.Fatal(err)
	}
	questions := func() int64 {
		t.Helper()
		var name string
		var n int64
		if err := db.QueryRowContext(t.Context(), "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cost := func(run func() error) int64 {
		t.Helper()
		before := questions()
		if err := run(); err != nil {
			t.Fatal(err)
		}
		return questions() - before - 1 // the SHOW itself
	}
	plain := cost(func() error {
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			return err
		}
		if err := write(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	fenced := cost(func() error { return fence.Exec(t.Context(), store, fence.NewGrant("rt", 2), write) })
	if plain != 3 || fenced != plain {
		t.Fatalf("statements sent: fenced %d, unfenced %d; want 3 each", fenced, plain)
	}
}
