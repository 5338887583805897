// Package jobtest is a team's invoice job, fenced, and its tests of the GC-pause
// timeline written with the scenario kit: on PostgreSQL (pgxfence) and on SQLite
// (sqlfence). See README.md.
package jobtest

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

const createInvoices = `CREATE TABLE IF NOT EXISTS invoices (account VARCHAR(200) PRIMARY KEY, body TEXT NOT NULL)`

// Migrate creates fencegate's tables and the invoices table.
func Migrate(ctx context.Context, db *sql.DB, d migrations.Dialect) error {
	if err := migrations.Up(ctx, db, d); err != nil {
		return err
	}
	_, err := db.ExecContext(ctx, createInvoices)
	return err
}

// WriteInvoicePG writes the account's invoice on PostgreSQL under grant g. A holder
// whose lock has passed on is refused (fence.ErrStale, fence.ErrLost).
func WriteInvoicePG(ctx context.Context, store *pgxfence.Store, g fence.Grant, account, body string) error {
	return fence.Exec(ctx, store, g, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (account, body) VALUES ($1, $2)
ON CONFLICT (account) DO UPDATE SET body = EXCLUDED.body`, account, body)
		return err
	})
}

// WriteInvoiceSQL writes the account's invoice through database/sql under grant g,
// refused like WriteInvoicePG.
func WriteInvoiceSQL(ctx context.Context, store *sqlfence.Store, g fence.Grant, account, body string) error {
	return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (account, body) VALUES (?, ?)
ON CONFLICT (account) DO UPDATE SET body = excluded.body`, account, body)
		return err
	})
}

// WriteInvoiceUnfenced is the same write with no grant: what a job without fencing
// does. A frozen holder that wakes overwrites its successor's invoice.
func WriteInvoiceUnfenced(ctx context.Context, db *sql.DB, account, body string) error {
	_, err := db.ExecContext(ctx, `INSERT INTO invoices (account, body) VALUES (?, ?)
ON CONFLICT (account) DO UPDATE SET body = excluded.body`, account, body)
	return err
}

// Invoices returns every account's invoice body.
func Invoices(ctx context.Context, db *sql.DB) (map[string]string, error) {
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
}
