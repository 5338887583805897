// Package jobtest is a team's invoice job, fenced, and its tests of the GC-pause
// timeline written with the scenario kit: on PostgreSQL (pgxfence) and on SQLite
// (sqlfence). See README.md.
package jobtest

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

const createInvoices = `CREATE TABLE IF NOT EXISTS invoices
	(account VARCHAR(200) PRIMARY KEY, body TEXT NOT NULL, token BIGINT NOT NULL)`

// Migrate creates fencegate's tables and the invoices table.
func Migrate(ctx context.Context, db *sql.DB, d migrations.Dialect) error {
	if err := migrations.Up(ctx, db, d); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, createInvoices)
	return err
}

// WriteInvoicePG writes the account's invoice on PostgreSQL under grant g, with
// the token it was written at. Through a *pgxfence.Store a holder whose lock has
// passed on is refused (fence.ErrStale, fence.ErrLost).
func WriteInvoicePG(ctx context.Context, store fence.Store[pgx.Tx], g fence.Grant, account, body string) error {
	return fence.Exec(ctx, store, g, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (account, body, token) VALUES ($1, $2, $3)
ON CONFLICT (account) DO UPDATE SET body = EXCLUDED.body, token = EXCLUDED.token`, account, body, g.Token())
		return err
	})
}

// WriteInvoiceSQL is WriteInvoicePG through database/sql: a *sqlfence.Store
// refuses a stale holder, an Unfenced store lets its write land.
func WriteInvoiceSQL(ctx context.Context, store fence.Store[*sql.Tx], g fence.Grant, account, body string) error {
	return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (account, body, token) VALUES (?, ?, ?)
ON CONFLICT (account) DO UPDATE SET body = excluded.body, token = excluded.token`, account, body, int64(g.Token()))
		return err
	})
}

// Unfenced is what a job without fencing has: a plain transaction that ignores
// the grant. A frozen holder that wakes overwrites its successor's invoice.
type Unfenced struct{ DB *sql.DB }

// Fenced runs fn in a transaction and commits it; it never refuses a grant.
func (u Unfenced) Fenced(ctx context.Context, _ fence.Grant, fn func(*sql.Tx) error) error {
	tx, err := u.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Tokens returns, per account, the token its invoice was last written at: what
// the scenario kit's verdict compares with the writes it recorded.
func Tokens(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT account, token FROM invoices`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var a string
		var tok int64
		if err := rows.Scan(&a, &tok); err != nil {
			return nil, err
		}
		out[a] = strconv.FormatInt(tok, 10)
	}
	return out, rows.Err()
}
