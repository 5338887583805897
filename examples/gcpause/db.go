package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the migrations

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// invoiceTable is the example's own table. fence_token records which grant wrote the
// row, so the final row shows whose invoice survived.
const invoiceTable = "gcpause_invoices"

const createInvoices = `CREATE TABLE IF NOT EXISTS gcpause_invoices (
    account     VARCHAR(200) NOT NULL PRIMARY KEY,
    total_cents BIGINT NOT NULL,
    written_by  VARCHAR(50) NOT NULL,
    fence_token BIGINT NOT NULL DEFAULT 0
)`

// The invoice write is the same statement with and without fencing: the only
// difference between the two runs is whether it goes through fence.Exec.
const (
	upsertInvoice = `INSERT INTO gcpause_invoices (account, total_cents, written_by, fence_token)
VALUES (?, ?, ?, ?)
ON CONFLICT (account) DO UPDATE SET total_cents = excluded.total_cents,
    written_by = excluded.written_by, fence_token = excluded.fence_token`
	upsertInvoiceMySQL = `INSERT INTO gcpause_invoices (account, total_cents, written_by, fence_token)
VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE total_cents = VALUES(total_cents),
    written_by = VALUES(written_by), fence_token = VALUES(fence_token)`
	selectInvoice = `SELECT total_cents, written_by, fence_token FROM gcpause_invoices WHERE account = ?`
)

// backend names the database the invoices land in.
type backend struct {
	kind string // "sqlite", "postgres" or "mysql"
	dsn  string // for sqlite, the database file
}

// invoice is one row of gcpause_invoices.
type invoice struct {
	Account    string `json:"account"`
	TotalCents int64  `json:"total_cents"`
	WrittenBy  string `json:"written_by"`
	Token      int64  `json:"fence_token"`
}

func (inv invoice) String() string {
	return fmt.Sprintf("account=%s total=%s written_by=%q fence_token=%d",
		inv.Account, dollars(inv.TotalCents), inv.WrittenBy, inv.Token)
}

func dollars(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

// invoiceDB is one process's connection to the invoice database.
type invoiceDB interface {
	// WriteFenced upserts inv inside fence.Exec for g: the adapter raises the
	// resource's stored token to g.Token() in the same transaction, or refuses with a
	// *fence.StaleError and writes nothing.
	WriteFenced(ctx context.Context, g fence.Grant, inv invoice) error
	// WritePlain upserts inv in an ordinary transaction: what a lock without fencing
	// leaves an application with.
	WritePlain(ctx context.Context, inv invoice) error
	// Read returns the stored invoice of account, or false when there is none.
	Read(ctx context.Context, account string) (invoice, bool, error)
	Close() error
}

// openSQL opens b through database/sql: the orchestrator's setup uses it for every
// backend, the workers for SQLite and MySQL. sqlfence's openers set what its dialects
// need: WAL, a busy timeout and BEGIN IMMEDIATE for the SQLite file the processes
// share; matched rather than changed row counts for MySQL.
func openSQL(b backend) (*sql.DB, migrations.Dialect, error) {
	switch b.kind {
	case "sqlite":
		db, err := sqlite.Open(b.dsn)
		return db, migrations.SQLite, err
	case "mysql":
		db, err := mysql.Open(b.dsn)
		if err != nil {
			return nil, 0, fmt.Errorf("-mysql: %w", err)
		}
		return db, migrations.MySQL, nil
	case "postgres":
		db, err := sql.Open("pgx", b.dsn)
		return db, migrations.Postgres, err
	}
	return nil, 0, fmt.Errorf("unknown database kind %q", b.kind)
}

// describe names where b's data lands, without the password.
func (b backend) describe() string {
	switch b.kind {
	case "postgres":
		if cfg, err := pgx.ParseConfig(b.dsn); err == nil {
			return fmt.Sprintf("PostgreSQL %s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
		}
		return "PostgreSQL"
	case "mysql":
		if cfg, err := gomysql.ParseDSN(b.dsn); err == nil {
			return fmt.Sprintf("MySQL %s/%s", cfg.Addr, cfg.DBName)
		}
		return "MySQL"
	}
	return "SQLite file " + b.dsn
}

// rebind rewrites ? placeholders to $1..$n for PostgreSQL. The example's statements
// have no ? inside literals.
func rebind(kind, q string) string {
	if kind != "postgres" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// setupDB applies the library's migrations, creates the invoice table and clears what
// an earlier run left for resource. Clearing the resource's fence row is needed only
// because each run may start a fresh embedded etcd whose revisions, and so tokens,
// begin again at 1: a database that saw token 34 would rightly refuse token 3. A real
// deployment never lowers a stored token.
func setupDB(ctx context.Context, b backend, resource string) error {
	db, d, err := openSQL(b)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, d); err != nil {
		return fmt.Errorf("apply the library's migrations: %w", err)
	}
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{createInvoices, nil},
		{`DELETE FROM gcpause_invoices WHERE account = ?`, []any{resource}},
		{`DELETE FROM fence_tokens WHERE resource = ?`, []any{resource}},
	} {
		if _, err := db.ExecContext(ctx, rebind(b.kind, q.sql), q.args...); err != nil {
			return fmt.Errorf("set up %s: %w", invoiceTable, err)
		}
	}
	return nil
}

// openInvoiceDB connects a worker (or the orchestrator's final read) to b.
func openInvoiceDB(ctx context.Context, b backend) (invoiceDB, error) {
	switch b.kind {
	case "postgres":
		pool, err := pgxpool.New(ctx, b.dsn)
		if err != nil {
			return nil, fmt.Errorf("-postgres: %w", err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("-postgres: %w", err)
		}
		store, err := pgxfence.New(pool)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("-postgres: %w", err)
		}
		return &pgInvoices{pool: pool, store: store}, nil
	case "sqlite", "mysql":
		db, _, err := openSQL(b)
		if err != nil {
			return nil, err
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("%s: %w", b.kind, err)
		}
		d, upsert := migrations.SQLite, upsertInvoice
		if b.kind == "mysql" {
			d, upsert = migrations.MySQL, upsertInvoiceMySQL
		}
		store, err := sqlfence.New(db, d)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("%s: %w", b.kind, err)
		}
		return &sqlInvoices{db: db, store: store, upsert: upsert}, nil
	}
	return nil, fmt.Errorf("unknown database kind %q", b.kind)
}

// sqlInvoices writes through database/sql and sqlfence (SQLite, MySQL).
type sqlInvoices struct {
	db     *sql.DB
	store  *sqlfence.Store
	upsert string
}

func (s *sqlInvoices) WriteFenced(ctx context.Context, g fence.Grant, inv invoice) error {
	return fence.Exec(ctx, s.store, g, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.upsert, inv.Account, inv.TotalCents, inv.WrittenBy, inv.Token)
		return err
	})
}

func (s *sqlInvoices) WritePlain(ctx context.Context, inv invoice) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.upsert, inv.Account, inv.TotalCents, inv.WrittenBy, inv.Token); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *sqlInvoices) Read(ctx context.Context, account string) (invoice, bool, error) {
	inv := invoice{Account: account}
	err := s.db.QueryRowContext(ctx, selectInvoice, account).Scan(&inv.TotalCents, &inv.WrittenBy, &inv.Token)
	if errors.Is(err, sql.ErrNoRows) {
		return invoice{}, false, nil
	}
	return inv, err == nil, err
}

func (s *sqlInvoices) Close() error { return s.db.Close() }

// pgInvoices writes through pgx and pgxfence (PostgreSQL).
type pgInvoices struct {
	pool  *pgxpool.Pool
	store *pgxfence.Store
}

func (p *pgInvoices) WriteFenced(ctx context.Context, g fence.Grant, inv invoice) error {
	return fence.Exec(ctx, p.store, g, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, rebind("postgres", upsertInvoice), inv.Account, inv.TotalCents, inv.WrittenBy, inv.Token)
		return err
	})
}

func (p *pgInvoices) WritePlain(ctx context.Context, inv invoice) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, rebind("postgres", upsertInvoice), inv.Account, inv.TotalCents, inv.WrittenBy, inv.Token)
		return err
	})
}

func (p *pgInvoices) Read(ctx context.Context, account string) (invoice, bool, error) {
	inv := invoice{Account: account}
	err := p.pool.QueryRow(ctx, rebind("postgres", selectInvoice), account).Scan(&inv.TotalCents, &inv.WrittenBy, &inv.Token)
	if errors.Is(err, pgx.ErrNoRows) {
		return invoice{}, false, nil
	}
	return inv, err == nil, err
}

func (p *pgInvoices) Close() error { p.pool.Close(); return nil }
