package jobtest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/examples/jobtest"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// TestInvoice_gcPause_unfenced is the same timeline on a store that does not fence,
// with a job that checks its lock's context before writing: a passed that check
// before it froze, so the kit's verdict must catch its stale invoice landing over
// b's. (With scenario.Run instead of Record, this test fails and prints the verdict.)
func TestInvoice_gcPause_unfenced(t *testing.T) {
	h := scenario.Record(t, scenario.Config{
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
			l, err := w.Acquire(ctx, "account-42")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			if err := l.Context().Err(); err != nil {
				return err // the check a job without fencing relies on
			}
			return jobtest.WriteInvoiceSQL(ctx, scenario.Store(w, jobtest.Unfenced{DB: db}), l, "account-42", w.Name()+"'s invoice")
		},
		Read: readSQLite,
	}, gcPause(scenario.InStore)...)
	err := h.Check()
	if !errors.Is(err, scenario.ErrViolation) {
		t.Fatalf("Check() = %v; want a's stale invoice caught", err)
	}
	t.Logf("the verdict on the unfenced job:\n%v", err)
}
