package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// store is the worker's database: PostgreSQL through pgx and pgxfence, or MySQL /
// MariaDB and SQLite through database/sql and sqlfence.
type store interface {
	// fenced runs fn in a transaction fenced for g (fence.Exec); plain runs it in an
	// unfenced one.
	fenced(ctx context.Context, g fence.Grant, fn func(txn) error) error
	plain(ctx context.Context, fn func(txn) error) error
	ping(ctx context.Context) error
	setup(ctx context.Context, accounts []string) error
	close()
}

// txn is the job's view of a transaction: read an account, write it back.
type txn interface {
	read(ctx context.Context, account string) (balance int64, tokens []int64, err error)
	write(ctx context.Context, account string, balance int64, tokens []int64, token int64, worker string) error
}

// openStore picks the database by the DSN's scheme: postgres:// or postgresql://,
// mysql://<go-sql-driver DSN>, sqlite://<file path>. idle, when > 0, replaces the
// lock's lease as the bound on a fenced transaction's idle time. It does no I/O.
func openStore(ctx context.Context, dsn string, idle time.Duration) (store, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return pgStore{db, idle}, nil
	case strings.HasPrefix(dsn, "mysql://"):
		db, err := mysql.Open(strings.TrimPrefix(dsn, "mysql://"))
		if err != nil {
			return nil, err
		}
		db.SetMaxIdleConns(4)
		return sqlStore{db, migrations.MySQL, idle}, nil
	case strings.HasPrefix(dsn, "sqlite://"):
		db, err := sqlite.Open(strings.TrimPrefix(dsn, "sqlite://"))
		if err != nil {
			return nil, err
		}
		return sqlStore{db, migrations.SQLite, idle}, nil
	}
	return nil, errors.New("-dsn: want postgres://..., mysql://user:pass@tcp(host:port)/db or sqlite://path")
}

// waitDB waits up to a minute for the database to answer: a worker started with its
// database may come up first.
func waitDB(ctx context.Context, s store) error {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ping, cancelPing := context.WithTimeout(wait, 2*time.Second)
		err := s.ping(ping)
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

type pgStore struct {
	db   *pgxpool.Pool
	idle time.Duration
}

type pgTxn struct{ tx pgx.Tx }

func (s pgStore) fenced(ctx context.Context, g fence.Grant, fn func(txn) error) error {
	var opts []pgxfence.Option
	if s.idle > 0 {
		opts = append(opts, pgxfence.WithIdleTimeout(s.idle))
	}
	st, err := pgxfence.New(s.db, opts...)
	if err != nil {
		return err
	}
	return fence.Exec(ctx, st, g, func(tx pgx.Tx) error { return fn(pgTxn{tx}) })
}

func (s pgStore) plain(ctx context.Context, fn func(txn) error) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return fn(pgTxn{tx}) })
}

func (s pgStore) ping(ctx context.Context) error { return s.db.Ping(ctx) }
func (s pgStore) close()                         { s.db.Close() }

func (t pgTxn) read(ctx context.Context, account string) (balance int64, tokens []int64, err error) {
	err = t.tx.QueryRow(ctx, `SELECT balance, tokens FROM billing_accounts WHERE account = $1`, account).Scan(&balance, &tokens)
	return balance, tokens, err
}

func (t pgTxn) write(ctx context.Context, account string, balance int64, tokens []int64, token int64, worker string) error {
	if _, err := t.tx.Exec(ctx, `UPDATE billing_accounts SET balance = $2, tokens = $3 WHERE account = $1`, account, balance, tokens); err != nil {
		return err
	}
	_, err := t.tx.Exec(ctx, `INSERT INTO billing_writes (account, token, worker, balance) VALUES ($1, $2, $3, $4)`, account, token, worker, balance)
	return err
}

// pgSchema: the balance row every job rewrites (with the tokens of the writes that
// produced it) and a ledger row per write, inserted in the same transaction. A lost
// update shows as a ledger row the balance does not count.
const pgSchema = `
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

func (s pgStore) setup(ctx context.Context, accounts []string) error {
	sqlDB := stdlib.OpenDBFromPool(s.db)
	defer sqlDB.Close()
	if err := migrations.Up(ctx, sqlDB, migrations.Postgres); err != nil {
		return err
	}
	if _, err := s.db.Exec(ctx, pgSchema); err != nil {
		return fmt.Errorf("billing schema: %w", err)
	}
	_, err := s.db.Exec(ctx, `INSERT INTO billing_accounts (account) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, accounts)
	return err
}

// sqlStore keeps the row's tokens as comma-separated text (MySQL and SQLite have no
// arrays).
type sqlStore struct {
	db   *sql.DB
	d    migrations.Dialect
	idle time.Duration
}

type sqlTxn struct{ tx *sql.Tx }

func (s sqlStore) fenced(ctx context.Context, g fence.Grant, fn func(txn) error) error {
	var opts []sqlfence.Option
	if s.idle > 0 {
		opts = append(opts, sqlfence.WithIdleTimeout(s.idle))
	}
	st, err := sqlfence.New(s.db, s.d, opts...)
	if err != nil {
		return err
	}
	return fence.Exec(ctx, st, g, func(tx *sql.Tx) error { return fn(sqlTxn{tx}) })
}

func (s sqlStore) plain(ctx context.Context, fn func(txn) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(sqlTxn{tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s sqlStore) ping(ctx context.Context) error { return s.db.PingContext(ctx) }
func (s sqlStore) close()                         { s.db.Close() }

func (t sqlTxn) read(ctx context.Context, account string) (balance int64, tokens []int64, err error) {
	var text string
	if err = t.tx.QueryRowContext(ctx, `SELECT balance, tokens FROM billing_accounts WHERE account = ?`, account).Scan(&balance, &text); err != nil {
		return 0, nil, err
	}
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' }) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("billing_accounts.tokens of %s: %w", account, err)
		}
		tokens = append(tokens, n)
	}
	return balance, tokens, nil
}

func (t sqlTxn) write(ctx context.Context, account string, balance int64, tokens []int64, token int64, worker string) error {
	parts := make([]string, len(tokens))
	for i, n := range tokens {
		parts[i] = strconv.FormatInt(n, 10)
	}
	if _, err := t.tx.ExecContext(ctx, `UPDATE billing_accounts SET balance = ?, tokens = ? WHERE account = ?`, balance, strings.Join(parts, ","), account); err != nil {
		return err
	}
	_, err := t.tx.ExecContext(ctx, `INSERT INTO billing_writes (account, token, worker, balance) VALUES (?, ?, ?, ?)`, account, token, worker, balance)
	return err
}

func (s sqlStore) setup(ctx context.Context, accounts []string) error {
	md, schema, insert := migrations.SQLite, []string{
		`CREATE TABLE IF NOT EXISTS billing_accounts (account TEXT PRIMARY KEY, balance INTEGER NOT NULL DEFAULT 0, tokens TEXT NOT NULL DEFAULT '')`,
		`CREATE TABLE IF NOT EXISTS billing_writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, account TEXT NOT NULL, token INTEGER NOT NULL, worker TEXT NOT NULL, balance INTEGER NOT NULL, at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
	}, `INSERT OR IGNORE INTO billing_accounts (account) VALUES (?)`
	if s.d == migrations.MySQL {
		md, schema, insert = migrations.MySQL, []string{
			`CREATE TABLE IF NOT EXISTS billing_accounts (account VARCHAR(200) PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0, tokens TEXT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS billing_writes (seq BIGINT AUTO_INCREMENT PRIMARY KEY, account VARCHAR(200) NOT NULL, token BIGINT NOT NULL, worker VARCHAR(200) NOT NULL, balance BIGINT NOT NULL, at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
		}, `INSERT IGNORE INTO billing_accounts (account, balance, tokens) VALUES (?, 0, '')`
	}
	if err := migrations.Up(ctx, s.db, md); err != nil {
		return err
	}
	for _, q := range schema {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("billing schema: %w", err)
		}
	}
	for _, a := range accounts {
		if _, err := s.db.ExecContext(ctx, insert, a); err != nil {
			return fmt.Errorf("billing account %s: %w", a, err)
		}
	}
	return nil
}
