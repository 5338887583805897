package jobtest_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/examples/jobtest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

func TestInvoice_gcPause_sqlite(t *testing.T) {
	scenario.Run(t, scenario.Config{
		Workers: []string{"a", "b"},
		Setup: func(t *testing.T) string {
			path := t.TempDir() + "/app.db"
			db, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := jobtest.Migrate(t.Context(), db, migrations.SQLite); err != nil {
				t.Fatal(err)
			}
			return path
		},
		Job: func(ctx context.Context, w *scenario.Worker) error {
			db, err := sqlite.Open(w.Data())
			if err != nil {
				return err
			}
			defer db.Close()
			store, err := sqlfence.New(db, migrations.SQLite)
			if err != nil {
				return err
			}
			l, err := w.Acquire(ctx, "account-42")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			return jobtest.WriteInvoiceSQL(ctx, scenario.Store(w, store), l, "account-42", w.Name()+"'s invoice")
		},
		Read: readSQLite,
	}, gcPause(scenario.InStore)...)
}

func readSQLite(ctx context.Context, path string) (map[string]string, error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return jobtest.Tokens(ctx, db)
}
