package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/mysqltest"
	"github.com/fencegate/fencegate/migrations"
)

// mariadb is the one MariaDB server of this test package, started on first use.
var mariadb = mysqltest.New()

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(sqliteChild())
	}
	code := m.Run()
	if err := mariadb.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// mysqlDB returns a pool opened with OpenMySQL on a fresh, migrated database.
func mysqlDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn := mariadb.DSN(t)
	db, err := sqlfence.OpenMySQL(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(context.Background(), db, migrations.MySQL); err != nil {
		t.Fatalf("migrations.Up(mysql): %v", err)
	}
	return db, dsn
}

// sqliteDB returns a pool opened with OpenSQLite on a fresh, migrated file.
func sqliteDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	db, err := sqlfence.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(context.Background(), db, migrations.SQLite); err != nil {
		t.Fatalf("migrations.Up(sqlite): %v", err)
	}
	return db, path
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
