package scenario_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// TestInvoice_gcPause is the README's PostgreSQL example, as it is there: a
// freezes with its write in flight, past its lease, while etcd's leader is
// killed; b writes; a's statement reaches the store after b's and is refused.
func TestInvoice_gcPause(t *testing.T) {
	t.Parallel() // a run mostly waits out a lease
	scenario.Run(t, scenario.Config{
		Workers:     []string{"a", "b"},
		EtcdMembers: 3,
		StoreServer: postgres,
		Setup: func(t *testing.T) string {
			dsn := postgres.DSN(t)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := migrations.Up(t.Context(), db, migrations.Postgres); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(t.Context(), `CREATE TABLE invoices
				(account text PRIMARY KEY, total bigint NOT NULL, token bigint NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			return dsn
		},
		Job: func(ctx context.Context, w *scenario.Worker) error {
			dsn, err := w.StoreDSN(w.Data()) // through the worker's own proxy, which OnTheWire needs
			if err != nil {
				return err
			}
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return err
			}
			defer pool.Close()
			store, err := pgxfence.New(pool)
			if err != nil {
				return err
			}
			l, err := w.Acquire(ctx, "account-42")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			work := l.Context() // as in the quick start: every statement under the lock uses it
			// scenario.Store records each fenced transaction.
			return fence.Exec(work, scenario.Store(w, store), l, func(tx pgx.Tx) error {
				_, err := tx.Exec(work, `INSERT INTO invoices VALUES ($1, $2, $3) ON CONFLICT (account)
					DO UPDATE SET total = EXCLUDED.total, token = EXCLUDED.token`, l.Resource(), 100, l.Token())
				return err
			})
		},
		Read: func(ctx context.Context, dsn string) (map[string]string, error) {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return nil, err
			}
			defer conn.Close(ctx)
			var token string // scenario.Store's value for a write is its token
			err = conn.QueryRow(ctx, `SELECT token::text FROM invoices WHERE account = 'account-42'`).Scan(&token)
			if errors.Is(err, pgx.ErrNoRows) {
				return map[string]string{}, nil
			}
			return map[string]string{"account-42": token}, err
		},
	},
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.OnTheWire).Until("b", scenario.Finished),
		scenario.KillEtcdLeader(),
		scenario.Start("b"),
	)
}
