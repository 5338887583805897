package scenario_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// writeTotal is a job's own code, unchanged under the kit: it writes the account's
// total and the token that wrote it through whatever Store it is given.
func writeTotal(ctx context.Context, store fence.Store[*sql.Tx], l fence.Grant, total int) error {
	return fence.Exec(ctx, store, l, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO totals (account, total, token) VALUES (?, ?, ?)
ON CONFLICT (account) DO UPDATE SET total = excluded.total, token = excluded.token`, l.Resource(), total, l.Token())
		return err
	})
}

// TestStore_gcPause_sqlite records the job's writes through scenario.Store, with
// no Worker.Write in the job: the GC-pause timeline passes, a's write refused.
func TestStore_gcPause_sqlite(t *testing.T) {
	h := scenario.Run(t, scenario.Config{
		Workers: []string{"a", "b"},
		Setup: func(t *testing.T) string {
			path := t.TempDir() + "/totals.db"
			db := openSQLite(t, path)
			if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(t.Context(), `CREATE TABLE totals (account TEXT PRIMARY KEY, total BIGINT NOT NULL, token BIGINT NOT NULL)`); err != nil {
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
			l, err := w.Acquire(ctx, "account-7")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			return writeTotal(ctx, scenario.Store(w, store), l, 100)
		},
		Read: func(ctx context.Context, path string) (map[string]string, error) {
			db, err := sqlite.Open(path)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			var tok string
			err = db.QueryRowContext(ctx, `SELECT token FROM totals WHERE account = 'account-7'`).Scan(&tok)
			return map[string]string{"account-7": tok}, err
		},
	}, gcPause()...)
	a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
	if b.Outcome != scenario.Acknowledged || a.Outcome == scenario.Acknowledged {
		t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's refused", a, b)
	}
}
