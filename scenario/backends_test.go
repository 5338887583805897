package scenario_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the migrations

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/scenario"
)

// writeFunc writes one invoice, value for g's resource, and calls inTx before it
// commits.
type writeFunc func(ctx context.Context, g fence.Grant, value string, inTx func() error) error

// backend is a store the invoice job can run on.
type backend struct {
	name  string
	setup func(t *testing.T) string                                                   // in the test process: a DSN
	open  func(ctx context.Context, dsn string, bare bool) (writeFunc, func(), error) // in a worker
	read  func(ctx context.Context, dsn string) (map[string]string, error)
}

var backends = []backend{
	{"sqlite", sqliteSetup, sqliteOpen, sqliteRead},
	{"postgres", pgSetup, pgOpen, pgRead},
	{"mariadb", mariaSetup, mariaOpen, mariaRead},
}

// config is the invoice job on b: each worker takes the account's lock and writes
// its invoice, through the fenced store or, when bare, with a plain statement.
// Inside the write it reaches "in transaction".
func (b backend) config(bare bool) scenario.Config {
	return scenario.Config{
		Workers: []string{"a", "b"},
		Setup:   b.setup,
		Job: func(ctx context.Context, w *scenario.Worker) error {
			write, closeFn, err := b.open(ctx, w.Data(), bare)
			if err != nil {
				return err
			}
			defer closeFn()
			return invoiceJob(ctx, w, "invoice-42", func(ctx context.Context, g fence.Grant, value string) error {
				return write(ctx, g, value, func() error { return w.Reach(ctx, "in transaction") })
			})
		},
		Read: b.read,
	}
}

func sqlSetup(t *testing.T, db *sql.DB, d migrations.Dialect) {
	t.Helper()
	if err := migrations.Up(t.Context(), db, d); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), createInvoices); err != nil {
		t.Fatal(err)
	}
}

// sqlWrite writes through sqlfence, or bare through db.
func sqlWrite(db *sql.DB, store *sqlfence.Store, upsert string, bare bool) writeFunc {
	return func(ctx context.Context, g fence.Grant, value string, inTx func() error) error {
		if bare {
			if _, err := db.ExecContext(ctx, upsert, g.Resource(), value); err != nil {
				return err
			}
			return inTx()
		}
		return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, upsert, g.Resource(), value); err != nil {
				return err
			}
			return inTx()
		})
	}
}

func mariaSetup(t *testing.T) string {
	dsn := mariadb.DSN(t)
	db, err := mysql.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sqlSetup(t, db, migrations.MySQL)
	return dsn
}

const upsertMySQL = `INSERT INTO scenario_invoices (account, written_by) VALUES (?, ?) ON DUPLICATE KEY UPDATE written_by = VALUES(written_by)`

func mariaOpen(ctx context.Context, dsn string, bare bool) (writeFunc, func(), error) {
	db, err := mysql.Open(dsn)
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlfence.New(db, migrations.MySQL)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return sqlWrite(db, store, upsertMySQL, bare), func() { db.Close() }, nil
}

func mariaRead(ctx context.Context, dsn string) (map[string]string, error) {
	db, err := mysql.Open(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return readInvoices(ctx, db)
}

func pgSetup(t *testing.T) string {
	dsn := postgres.DSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sqlSetup(t, db, migrations.Postgres)
	return dsn
}

const upsertPG = `INSERT INTO scenario_invoices (account, written_by) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET written_by = EXCLUDED.written_by`

func pgOpen(ctx context.Context, dsn string, bare bool) (writeFunc, func(), error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	store, err := pgxfence.New(pool)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	write := func(ctx context.Context, g fence.Grant, value string, inTx func() error) error {
		if bare {
			if _, err := pool.Exec(ctx, upsertPG, g.Resource(), value); err != nil {
				return err
			}
			return inTx()
		}
		return fence.Exec(ctx, store, g, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, upsertPG, g.Resource(), value); err != nil {
				return err
			}
			return inTx()
		})
	}
	return write, pool.Close, nil
}

func pgRead(ctx context.Context, dsn string) (map[string]string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	return readInvoices(ctx, db)
}
