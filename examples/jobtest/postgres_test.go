package jobtest_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/examples/jobtest"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// pgConfig runs write on PostgreSQL: each worker connects through its own proxy
// to the store (Worker.StoreDSN, which OnTheWire needs), takes account-42's lock
// and writes its invoice with write.
func pgConfig(write func(ctx context.Context, w *scenario.Worker, pool *pgxpool.Pool, l *lockclient.Lock) error) scenario.Config {
	return scenario.Config{
		Workers:     []string{"a", "b"},
		StoreServer: postgres,
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
			dsn, err := w.StoreDSN(w.Data())
			if err != nil {
				return err
			}
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return err
			}
			defer pool.Close()
			l, err := w.Acquire(ctx, "account-42")
			if err != nil {
				return err
			}
			defer l.Release(context.WithoutCancel(ctx))
			return write(ctx, w, pool, l)
		},
		Read: func(ctx context.Context, dsn string) (map[string]string, error) {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				return nil, err
			}
			defer db.Close()
			return jobtest.Tokens(ctx, db)
		},
	}
}

// TestInvoice_gcPause_postgres: the fenced job as the README's quick start writes
// it, every statement on the lock's context. a's write reaches PostgreSQL after
// b's and is refused there; a returns fence.ErrStale, or the cancellation of its
// lock's context if that came first: either is a fenced job's stop.
func TestInvoice_gcPause_postgres(t *testing.T) {
	scenario.Run(t, pgConfig(func(ctx context.Context, w *scenario.Worker, pool *pgxpool.Pool, l *lockclient.Lock) error {
		store, err := pgxfence.New(pool)
		if err != nil {
			return err
		}
		work := l.Context() // every statement under the lock uses it
		// scenario.Store records each fenced transaction.
		return jobtest.WriteInvoicePG(work, scenario.Store(w, store), l, "account-42", w.Name()+"'s invoice")
	}), gcPause(scenario.OnTheWire)...)
}

// TestInvoice_gcPause_postgresUnfenced: the same job without the fence, a plain
// statement on the lock's context. a's statement was on its way before its lease
// ran out: it lands over b's invoice, and the verdict says so.
func TestInvoice_gcPause_postgresUnfenced(t *testing.T) {
	h := scenario.Record(t, pgConfig(func(ctx context.Context, w *scenario.Worker, pool *pgxpool.Pool, l *lockclient.Lock) error {
		work := l.Context()
		return w.Write(ctx, l, strconv.FormatInt(int64(l.Token()), 10), func(context.Context) error {
			_, err := pool.Exec(work, `INSERT INTO invoices (account, body, token) VALUES ($1, $2, $3)
ON CONFLICT (account) DO UPDATE SET body = EXCLUDED.body, token = EXCLUDED.token`, "account-42", w.Name()+"'s invoice", l.Token())
			return err
		})
	}), gcPause(scenario.OnTheWire)...)
	err := h.Check()
	if !errors.Is(err, scenario.ErrViolation) {
		t.Fatalf("Check() = %v; want a's stale invoice caught", err)
	}
	t.Logf("the verdict on the unfenced job:\n%v", err)
}
