package jobtest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/examples/jobtest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

func TestInvoice_gcPause_postgres(t *testing.T) {
	scenario.Run(t, scenario.Config{
		Workers: []string{"a", "b"},
		Setup: func(t *testing.T) string {
			dsn := postgres.DSN(t)
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := jobtest.Migrate(t.Context(), db, migrations.Postgres); err != nil {
				t.Fatal(err)
			}
			return dsn
		},
		Job: func(ctx context.Context, w *scenario.Worker) error {
			pool, err := pgxpool.New(ctx, w.Data())
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
			// scenario.Store records each fenced transaction and reaches InStore in it.
			return jobtest.WriteInvoicePG(ctx, scenario.Store(w, store), l, "account-42", w.Name()+"'s invoice")
		},
		Read: func(ctx context.Context, dsn string) (map[string]string, error) {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			return jobtest.Tokens(ctx, db)
		},
	}, gcPause()...)
}
