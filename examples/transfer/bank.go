package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// The two accounts and what each holds at the start, in cents.
const (
	acct42       = "account-42"
	acct7        = "account-7"
	openingCents = 100_000
)

var errInsufficient = errors.New("insufficient funds")

// bank is the example's database: the library's fence_tokens and its own
// transfer_accounts table, written only through fence.Exec.
type bank struct {
	db    *sql.DB
	store *sqlfence.Store
}

// openBank opens the SQLite file (sqlfence/sqlite's Open: WAL, a busy timeout,
// BEGIN IMMEDIATE), applies the library's migrations and opens both accounts.
// The two accounts' fence rows are cleared because each run starts a fresh
// throwaway etcd whose revisions, and so tokens, begin again at 1; a real
// deployment never lowers a stored token.
func openBank(ctx context.Context, path string) (*bank, error) {
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		db.Close()
		return nil, fmt.Errorf("apply the library's migrations: %w", err)
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS transfer_accounts (account TEXT PRIMARY KEY, cents BIGINT NOT NULL)`,
		`DELETE FROM transfer_accounts`,
		`DELETE FROM fence_tokens WHERE resource IN ('account-42', 'account-7')`,
		`INSERT INTO transfer_accounts (account, cents) VALUES ('account-42', 100000), ('account-7', 100000)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("set up the accounts: %w", err)
		}
	}
	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &bank{db: db, store: store}, nil
}

func (b *bank) Close() error { return b.db.Close() }

// move takes cents from one account and gives them to the other in one
// transaction fenced for g. With a set grant the adapter raises the stored token
// of every account in the set; a lower token stored for either refuses it all.
func (b *bank) move(ctx context.Context, g fence.Grant, from, to string, cents int64) error {
	return fence.Exec(ctx, b.store, g, func(tx *sql.Tx) error {
		var left int64
		if err := tx.QueryRowContext(ctx, `SELECT cents FROM transfer_accounts WHERE account = ?`, from).Scan(&left); err != nil {
			return err
		}
		if left < cents {
			return errInsufficient
		}
		if _, err := tx.ExecContext(ctx, `UPDATE transfer_accounts SET cents = cents - ? WHERE account = ?`, cents, from); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE transfer_accounts SET cents = cents + ? WHERE account = ?`, cents, to)
		return err
	})
}

// set overwrites an account's balance in a transaction fenced for g: what a
// holder that read the balance before it froze would write.
func (b *bank) set(ctx context.Context, g fence.Grant, acct string, cents int64) error {
	return fence.Exec(ctx, b.store, g, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE transfer_accounts SET cents = ? WHERE account = ?`, cents, acct)
		return err
	})
}

func (b *bank) balance(ctx context.Context, acct string) (int64, error) {
	var c int64
	err := b.db.QueryRowContext(ctx, `SELECT cents FROM transfer_accounts WHERE account = ?`, acct).Scan(&c)
	return c, err
}

// mark is the account's stored high-water token (0: none).
func (b *bank) mark(ctx context.Context, acct string) (fence.Token, error) {
	return fencemark.Read(ctx, b.db, migrations.SQLite, acct)
}

func dollars(cents int64) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }
