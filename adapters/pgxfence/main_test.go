package pgxfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the migrations

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/pgbouncertest"
	"github.com/fencegate/fencegate/migrations"
)

var (
	postgres = pgtest.New()
	bouncer  = pgbouncertest.New(postgres, 8) // PgBouncer in transaction pooling, pool 8
)

func TestMain(m *testing.M) {
	if os.Getenv(idleChildEnv) != "" {
		os.Exit(idleChild())
	}
	if os.Getenv(permitChildEnv) != "" {
		os.Exit(permitChild())
	}
	code := m.Run()
	if err := bouncer.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if err := postgres.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// newPool returns a pool on a fresh database with fencegate's migrations applied.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := postgres.DSN(t)
	return poolOn(t, dsn, dsn, 8)
}

// poolOn returns a pool of maxConns on dsn after applying the migrations through
// direct (the same database; migrations need a session of their own).
func poolOn(t testing.TB, dsn, direct string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db, err := sql.Open("pgx", direct)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(context.Background(), db, migrations.Postgres); err != nil {
		t.Fatalf("migrations.Up: %v", err)
	}
	return pool
}

// rebind turns the suite's ? placeholders into $1..$n (outside quoted strings).
func rebind(q string) string {
	var b strings.Builder
	n, quoted := 0, false
	for _, r := range q {
		switch {
		case r == '\'':
			quoted = !quoted
		case r == '?' && !quoted:
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queryInt returns the single integer q selects; fence.ErrNotFound for no row.
func queryInt(ctx context.Context, q queryRower, sql string, args ...any) (int64, error) {
	var v *int64
	err := q.QueryRow(ctx, rebind(sql), args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fence.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	if v == nil {
		return 0, fmt.Errorf("%s: NULL", sql)
	}
	return *v, nil
}

// suiteExec runs a statement of the shared suites (? placeholders) on db: a pool
// outside any transaction, or a fenced transaction.
func suiteExec[DB interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}](ctx context.Context, db DB, q string, args ...any) error {
	_, err := db.Exec(ctx, rebind(q), args...)
	return err
}

// onPool returns the shared suites' Exec and QueryInt on pool.
func onPool(pool *pgxpool.Pool) (exec func(context.Context, string, ...any) error, query func(context.Context, string, ...any) (int64, error)) {
	exec = func(ctx context.Context, q string, args ...any) error { return suiteExec(ctx, pool, q, args...) }
	query = func(ctx context.Context, q string, args ...any) (int64, error) {
		return queryInt(ctx, pool, q, args...)
	}
	return exec, query
}
