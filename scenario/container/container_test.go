//go:build e2e

package container_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
	"github.com/fencegate/fencegate/scenario/container"
)

var postgres = pgtest.New()

func TestMain(m *testing.M) { scenario.Main(m, func() { postgres.Close() }) }

const upsert = `INSERT INTO invoices (account, body) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET body = EXCLUDED.body`

// TestRun_gcPause_containers is the GC-pause timeline with workers as containers:
// a is paused (docker pause) at its write past its lease, b writes, a wakes and is
// refused; then a is killed (docker kill) in a second run's transaction.
func TestRun_gcPause_containers(t *testing.T) {
	launcher := container.New(t, container.WithTags("e2e"))
	for _, c := range []struct {
		name  string
		steps []*scenario.Step
	}{
		{"pause", []*scenario.Step{
			scenario.Start("a"),
			scenario.Freeze("a").When("a", scenario.AboutToWrite).Until("b", scenario.Finished),
			scenario.Start("b"),
		}},
		{"kill", []*scenario.Step{
			scenario.Start("a"),
			scenario.Kill("a").When("a", "in transaction"),
			scenario.Start("b"),
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := scenario.Run(t, config(launcher), c.steps...)
			if v := h.Final["account-42"]; len(v) == 0 || v[0] != 'b' {
				t.Fatalf("final %v: want b's invoice\n%s", h.Final, h.Timelines())
			}
		})
	}
}

func config(l scenario.Launcher) scenario.Config {
	return scenario.Config{
		Workers:  []string{"a", "b"},
		Launcher: l,
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
			if _, err := db.ExecContext(t.Context(), `CREATE TABLE invoices (account TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
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
			body := fmt.Sprintf("%s@%d", w.Name(), l.Token())
			return w.Write(ctx, l, body, func(ctx context.Context) error {
				return fence.Exec(ctx, store, l, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, upsert, "account-42", body); err != nil {
						return err
					}
					return w.Reach(ctx, "in transaction")
				})
			})
		},
		Read: func(ctx context.Context, dsn string) (map[string]string, error) {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			rows, err := db.QueryContext(ctx, `SELECT account, body FROM invoices`)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[string]string{}
			for rows.Next() {
				var a, b string
				if err := rows.Scan(&a, &b); err != nil {
					return nil, err
				}
				out[a] = b
			}
			return out, rows.Err()
		},
	}
}
