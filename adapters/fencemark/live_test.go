package fencemark_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

// TestRaise_liveHolder: a holder that still holds its lock in etcd has written
// once; the operator raises the mark to NextToken; the holder's next fenced
// writes (fence.Exec, Update and Upsert on a token column, and pgxfence on
// PostgreSQL) are refused at once, and the next holder's are accepted.
func TestRaise_liveHolder(t *testing.T) {
	srv := locktest.Start(t)
	for _, o := range backends() {
		t.Run(o.name, func(t *testing.T) {
			b := o.open(t)
			ctx := t.Context()
			exec := func(q string, args ...any) {
				t.Helper()
				if b.d == migrations.Postgres {
					for i := 1; strings.Contains(q, "?"); i++ {
						q = strings.Replace(q, "?", "$"+string(rune('0'+i)), 1)
					}
				}
				if _, err := b.db.ExecContext(ctx, q, args...); err != nil {
					t.Fatal(err)
				}
			}
			exec("CREATE TABLE balances (account VARCHAR(200) NOT NULL PRIMARY KEY, cents BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
			exec("INSERT INTO balances (account, cents) VALUES (?, ?)", "account-42", 100)

			locks, err := lockclient.New(srv.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { locks.Close() })
			holder, err := locks.Acquire(ctx, "account-42")
			if err != nil {
				t.Fatal(err)
			}
			store, err := sqlfence.New(b.db, b.d)
			if err != nil {
				t.Fatal(err)
			}
			credit := func(g fence.Grant) error {
				return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
					q := "UPDATE balances SET cents = cents + 1 WHERE account = ?"
					if b.d == migrations.Postgres {
						q = strings.Replace(q, "?", "$1", 1)
					}
					_, err := tx.ExecContext(ctx, q, "account-42")
					return err
				})
			}
			row := fence.Row{Table: "balances", Key: []fence.Col{{Name: "account", Value: "account-42"}}}
			if err := credit(holder); err != nil {
				t.Fatalf("the holder's first write: %v", err)
			}

			next, err := locks.NextToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			before, after, err := fencemark.Raise(ctx, b.db, b.d, "account-42", next)
			if err != nil || before != holder.Token() || after != next {
				t.Fatalf("Raise = %d, %d, %v; want %d, %d", before, after, err, holder.Token(), next)
			}
			if holder.Context().Err() != nil {
				t.Fatal("the holder's lock ended: the fence must work while it is held")
			}
			var stale *fence.StaleError
			if err := credit(holder); !errors.As(err, &stale) || stale.Seen != next {
				t.Fatalf("the holder's write after the fence = %v, want *fence.StaleError seeing %d", err, next)
			}
			if err := store.Update(ctx, holder, row, fence.Col{Name: "cents", Value: 0}); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("the holder's Update after the fence = %v, want ErrStale", err)
			}
			if err := store.Upsert(ctx, holder, row, fence.Col{Name: "cents", Value: 0}); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("the holder's Upsert after the fence = %v, want ErrStale", err)
			}
			if b.d == migrations.Postgres {
				err := fence.Exec(ctx, pgxStore(t, b.dsn), holder, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "UPDATE balances SET cents = 0 WHERE account = $1", "account-42")
					return err
				})
				if !errors.Is(err, fence.ErrStale) {
					t.Fatalf("the holder's pgxfence write after the fence = %v, want ErrStale", err)
				}
			}
			var cents int64
			if err := b.db.QueryRowContext(ctx, "SELECT cents FROM balances").Scan(&cents); err != nil || cents != 101 {
				t.Fatalf("balance %d, %v; want 101: a refused write landed", cents, err)
			}

			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			successor, err := locks.Acquire(ctx, "account-42")
			if err != nil || successor.Token() < next {
				t.Fatalf("successor %v, %v; want a token >= %d", successor, err, next)
			}
			if err := credit(successor); err != nil {
				t.Fatalf("the successor's write: %v", err)
			}
			successor.Release(ctx)

			// A set holding the resource among others is cut off by its mark too.
			set, err := locks.AcquireSet(ctx, []string{"account-42", "account-7"})
			if err != nil {
				t.Fatal(err)
			}
			if err := credit(set); err != nil {
				t.Fatalf("the set's first write: %v", err)
			}
			next, err = locks.NextToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, after, err := fencemark.Raise(ctx, b.db, b.d, "account-7", next); err != nil || after != next {
				t.Fatalf("Raise(account-7) = %d, %v", after, err)
			}
			if err := credit(set); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("the set's write after account-7 was fenced = %v, want ErrStale", err)
			}
			set.Release(ctx)
		})
	}
}
