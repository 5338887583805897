package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/pgbouncertest"
	"github.com/fencegate/fencegate/migrations"
)

// mariadb and postgres are this test package's servers, each started on first use.
var (
	mariadb  = mysqltest.New()
	postgres = pgtest.New()
	bouncer  = pgbouncertest.New(postgres, 8) // PgBouncer in transaction pooling, pool 8
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(sqliteChild())
	}
	if os.Getenv(idleChildEnv) != "" {
		os.Exit(idleChild())
	}
	code := m.Run()
	for _, err := range []error{mariadb.Close(), bouncer.Close(), postgres.Close()} {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// mysqlDB returns a pool opened with mysql.Open on a fresh, migrated database.
func mysqlDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn := mariadb.DSN(t)
	db, err := mysql.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(context.Background(), db, migrations.MySQL); err != nil {
		t.Fatalf("migrations.Up(mysql): %v", err)
	}
	return db, dsn
}

// postgresDB returns a pool (pgx's database/sql driver) on a fresh, migrated database.
func postgresDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn := postgres.DSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(context.Background(), db, migrations.Postgres); err != nil {
		t.Fatalf("migrations.Up(postgres): %v", err)
	}
	return db, dsn
}

// dollars rewrites a test query's ? placeholders to PostgreSQL's $1..$n.
func dollars(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqliteDB returns a pool opened with sqlite.Open on a fresh, migrated file.
func sqliteDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(context.Background(), db, migrations.SQLite); err != nil {
		t.Fatalf("migrations.Up(sqlite): %v", err)
	}
	return db, path
}

// newStore is sqlfence.New for a db, dialect and options the test knows to be valid.
func newStore(db *sql.DB, d migrations.Dialect, opts ...sqlfence.Option) *sqlfence.Store {
	s, err := sqlfence.New(db, d, opts...)
	if err != nil {
		panic(err)
	}
	return s
}

func mustExec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func queryInt(t testing.TB, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var v int64
	if err := db.QueryRowContext(context.Background(), q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

type queryer interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

func scanInt(ctx context.Context, q queryer, query string, args ...any) (int64, error) {
	var v int64
	err := q.QueryRowContext(ctx, query, args...).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s", fence.ErrNotFound, query)
	}
	return v, err
}
