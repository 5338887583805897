package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// schema is the billing tables: the balance row every job rewrites (with the tokens
// of the writes that produced it, appended by each job), and a ledger row per write
// inserted in the same transaction. A lost update shows as a ledger row the balance
// does not count.
const schema = `
CREATE TABLE IF NOT EXISTS billing_accounts (
	account TEXT PRIMARY KEY,
	balance BIGINT NOT NULL DEFAULT 0,
	tokens  BIGINT[] NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS billing_writes (
	seq     BIGSERIAL PRIMARY KEY,
	account TEXT NOT NULL,
	token   BIGINT NOT NULL,
	worker  TEXT NOT NULL,
	balance BIGINT NOT NULL,
	at      TIMESTAMPTZ NOT NULL DEFAULT now()
);`

// setup applies the library's migrations (fence_tokens) and the billing schema, and
// inserts a zero row for every account that has none.
func setup(ctx context.Context, cfg config) error {
	db, err := pgxpool.New(ctx, cfg.dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := waitDB(ctx, db); err != nil {
		return err
	}
	sqlDB := stdlib.OpenDBFromPool(db)
	defer sqlDB.Close()
	if err := migrations.Up(ctx, sqlDB, migrations.Postgres); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("billing schema: %w", err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO billing_accounts (account) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, cfg.accounts); err != nil {
		return fmt.Errorf("billing accounts: %w", err)
	}
	return nil
}

// waitDB waits up to a minute for the database to answer: a worker started with its
// database may come up first.
func waitDB(ctx context.Context, db *pgxpool.Pool) error {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ping, cancelPing := context.WithTimeout(wait, 2*time.Second)
		err := db.Ping(ping)
		cancelPing()
		if err == nil {
			return nil
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("database not reachable: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
