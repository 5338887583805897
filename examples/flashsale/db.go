package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// maxConns caps the pool: a thousand buyers queue for 8 connections, as they would
// behind a real service, instead of opening a thousand.
const maxConns = 8

// backend names the database the shop runs on.
type backend struct {
	kind string // "sqlite", "postgres" or "mysql"
	dsn  string // for sqlite, the database file; empty: a temporary one
}

// The example's own tables, created afresh by every run.
var schema = []string{
	"DROP TABLE IF EXISTS flashsale_stock",
	"DROP TABLE IF EXISTS flashsale_orders",
	"DROP TABLE IF EXISTS flashsale_charges",
	"CREATE TABLE flashsale_stock (sku VARCHAR(64) NOT NULL PRIMARY KEY, items_left BIGINT NOT NULL)",
	"CREATE TABLE flashsale_orders (buyer VARCHAR(64) NOT NULL PRIMARY KEY, sku VARCHAR(64) NOT NULL)",
	"CREATE TABLE flashsale_charges (charge_id VARCHAR(64) NOT NULL PRIMARY KEY, " +
		"payment_key VARCHAR(200) NOT NULL, amount_cents BIGINT NOT NULL)",
}

// shop is one database with the library's adapter on it.
type shop struct {
	where string
	kind  string
	db    *sql.DB // setup, counts and the unguarded path
	guard guard   // the guarded decrement and the order insert
	// once runs fn through the adapter's idempotency keys; fn gets a function that
	// executes a statement (with ? placeholders) in the key's transaction.
	once  func(ctx context.Context, key, fingerprint string, fn func(exec execFunc) ([]byte, error)) (nolock.Result, error)
	close func()
}

// guard is what both adapters' Stores have for the no-lock path.
type guard interface {
	Decrement(ctx context.Context, c nolock.Counter, n int64) (left int64, err error)
	Insert(ctx context.Context, table string, cols ...fence.Col) error
}

// execFunc executes one statement, written with ? placeholders, in a transaction.
type execFunc func(ctx context.Context, q string, args ...any) error

// open connects to b, applies the library's migrations and creates the shop's tables.
func open(ctx context.Context, b backend) (*shop, error) {
	s, d, err := connect(ctx, b)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, s.db, d); err != nil {
		s.close()
		return nil, fmt.Errorf("apply the library's migrations: %w", err)
	}
	for _, q := range schema {
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			s.close()
			return nil, fmt.Errorf("create the shop's tables: %w", err)
		}
	}
	return s, nil
}

func connect(ctx context.Context, b backend) (*shop, migrations.Dialect, error) {
	switch b.kind {
	case "postgres":
		cfg, err := pgxpool.ParseConfig(b.dsn)
		if err != nil {
			return nil, 0, fmt.Errorf("-postgres: %w", err)
		}
		cfg.MaxConns = maxConns
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, 0, fmt.Errorf("-postgres: %w", err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, 0, fmt.Errorf("-postgres: %w", err)
		}
		store, err := pgxfence.New(pool)
		if err != nil {
			pool.Close()
			return nil, 0, fmt.Errorf("-postgres: %w", err)
		}
		db := stdlib.OpenDBFromPool(pool)
		s := &shop{
			where: fmt.Sprintf("PostgreSQL %s:%d/%s (pgxfence)", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database),
			kind:  b.kind, db: db, guard: store,
			close: func() { db.Close(); pool.Close() },
		}
		s.once = func(ctx context.Context, key, fp string, fn func(execFunc) ([]byte, error)) (nolock.Result, error) {
			return store.Once(ctx, key, fp, func(tx pgx.Tx) ([]byte, error) {
				return fn(func(ctx context.Context, q string, args ...any) error {
					_, err := tx.Exec(ctx, rebind(b.kind, q), args...)
					return err
				})
			})
		}
		return s, migrations.Postgres, nil

	case "mysql", "sqlite":
		var (
			db    *sql.DB
			err   error
			where string
			clean = func() {}
		)
		d, md := migrations.MySQL, migrations.MySQL
		if b.kind == "mysql" {
			if db, err = mysql.Open(b.dsn); err != nil {
				return nil, 0, fmt.Errorf("-mysql: %w", err)
			}
			where = "MySQL"
			if cfg, err := gomysql.ParseDSN(b.dsn); err == nil {
				where = fmt.Sprintf("MySQL %s/%s", cfg.Addr, cfg.DBName)
			}
		} else {
			d, md = migrations.SQLite, migrations.SQLite
			path := b.dsn
			if path == "" {
				dir, err := os.MkdirTemp("", "flashsale-")
				if err != nil {
					return nil, 0, err
				}
				path = filepath.Join(dir, "flashsale.db")
				clean = func() { os.RemoveAll(dir) }
			}
			if db, err = sqlite.Open(path); err != nil {
				clean()
				return nil, 0, fmt.Errorf("-sqlite: %w", err)
			}
			where = "SQLite file " + path
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			clean()
			return nil, 0, fmt.Errorf("%s: %w", b.kind, err)
		}
		store, err := sqlfence.New(db, d)
		if err != nil {
			db.Close()
			clean()
			return nil, 0, fmt.Errorf("%s: %w", b.kind, err)
		}
		s := &shop{
			where: where + " (sqlfence)", kind: b.kind, db: db, guard: store,
			close: func() { db.Close(); clean() },
		}
		s.once = func(ctx context.Context, key, fp string, fn func(execFunc) ([]byte, error)) (nolock.Result, error) {
			return store.Once(ctx, key, fp, func(tx *sql.Tx) ([]byte, error) {
				return fn(func(ctx context.Context, q string, args ...any) error {
					_, err := tx.ExecContext(ctx, q, args...)
					return err
				})
			})
		}
		return s, md, nil
	}
	return nil, 0, fmt.Errorf("unknown database kind %q", b.kind)
}

// exec and queryInt run the example's own statements, written with ? placeholders.
func (s *shop) exec(ctx context.Context, q string, args ...any) error {
	_, err := s.db.ExecContext(ctx, rebind(s.kind, q), args...)
	return err
}

func (s *shop) queryInt(ctx context.Context, q string, args ...any) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, rebind(s.kind, q), args...).Scan(&v)
	return v, err
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
