package fencemark_test

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

var (
	postgres = pgtest.New()
	mariadb  = mysqltest.New()
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, err := range []error{postgres.Close(), mariadb.Close()} {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// backend is one real database with the library's migrations applied.
type backend struct {
	name string
	db   *sql.DB
	d    migrations.Dialect
	dsn  string
}

// opener opens a fresh database of one kind for a (sub)test.
type opener struct {
	name string
	open func(t *testing.T) backend
}

// backends returns a fresh database of every kind: SQLite always, PostgreSQL
// and MariaDB from the test harnesses (skipped without a server unless CI is set).
func backends() []opener {
	open := func(name string, d migrations.Dialect, md migrations.Dialect, dsn func(*testing.T) string, openDB func(string) (*sql.DB, error)) opener {
		return opener{name, func(t *testing.T) backend {
			t.Helper()
			src := dsn(t)
			db, err := openDB(src)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			if err := migrations.Up(t.Context(), db, md); err != nil {
				t.Fatal(err)
			}
			return backend{name: name, db: db, d: d, dsn: src}
		}}
	}
	return []opener{
		open("sqlite", migrations.SQLite, migrations.SQLite,
			func(t *testing.T) string { return filepath.Join(t.TempDir(), "app.db") }, sqlite.Open),
		open("postgres", migrations.Postgres, migrations.Postgres,
			func(t *testing.T) string { return postgres.DSN(t) }, func(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }),
		open("mariadb", migrations.MySQL, migrations.MySQL,
			func(t *testing.T) string { return mariadb.DSN(t) }, mysql.Open),
	}
}

func TestRaise(t *testing.T) {
	for _, o := range backends() {
		t.Run(o.name, func(t *testing.T) {
			b := o.open(t)
			ctx := t.Context()
			if got, err := fencemark.Read(ctx, b.db, b.d, "acct-1"); err != nil || got != 0 {
				t.Fatalf("Read of an unknown resource = %d, %v; want 0", got, err)
			}
			steps := []struct {
				to, before, after fence.Token
			}{
				{10, 0, 10},  // inserts the row
				{5, 10, 10},  // never lowers
				{10, 10, 10}, // equal: unchanged
				{12, 10, 12}, // raises
			}
			for _, s := range steps {
				before, after, err := fencemark.Raise(ctx, b.db, b.d, "acct-1", s.to)
				if err != nil || before != s.before || after != s.after {
					t.Fatalf("Raise(%d) = %d, %d, %v; want %d, %d", s.to, before, after, err, s.before, s.after)
				}
			}
			if got, err := fencemark.Read(ctx, b.db, b.d, "acct-1"); err != nil || got != 12 {
				t.Fatalf("Read = %d, %v; want 12", got, err)
			}
			// A hostile resource name is a value, never SQL.
			if _, after, err := fencemark.Raise(ctx, b.db, b.d, "it's; DROP TABLE fence_tokens --", 3); err != nil || after != 3 {
				t.Fatalf("Raise of a hostile name = %d, %v", after, err)
			}
			// A fenced write with a lower token is refused; with the mark, accepted.
			s, err := sqlfence.New(b.db, b.d)
			if err != nil {
				t.Fatal(err)
			}
			noop := func(*sql.Tx) error { return nil }
			if err := fence.Exec(ctx, s, fence.NewGrant("acct-1", 11), noop); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("write with token 11 under mark 12 = %v, want ErrStale", err)
			}
			if err := fence.Exec(ctx, s, fence.NewGrant("acct-1", 12), noop); err != nil {
				t.Fatalf("write with token 12 under mark 12 = %v", err)
			}
		})
	}
}

func TestRaise_badInput(t *testing.T) {
	closed, err := sqlite.Open(filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close() // any I/O on it fails with "database is closed"
	tests := []struct {
		name     string
		db       *sql.DB
		d        migrations.Dialect
		resource string
		token    fence.Token
		msg      string // what the error, wrapping fence.ErrInvalidArgument, must say
	}{
		{"nil db", nil, migrations.SQLite, "r", 1, "nil *sql.DB"},
		{"unknown dialect", closed, migrations.Dialect(0), "r", 1, "unknown dialect 0"},
		{"empty resource", closed, migrations.SQLite, "", 1, "invalid resource: empty resource name"},
		{"long resource", closed, migrations.SQLite, string(make([]byte, 200+1)), 1, "resource name is 201 bytes, the limit is 200"},
		{"zero token", closed, migrations.SQLite, "r", 0, `fence: invalid token 0 for "r"`},
		{"negative token", closed, migrations.Postgres, "r", -4, `fence: invalid token -4 for "r"`},
	}
	is := func(err error, msg string) bool {
		return errors.Is(err, fence.ErrInvalidArgument) && strings.Contains(err.Error(), msg)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := fencemark.Raise(t.Context(), tt.db, tt.d, tt.resource, tt.token); !is(err, tt.msg) {
				t.Fatalf("Raise = %v, want fence.ErrInvalidArgument saying %q", err, tt.msg)
			}
			if tt.token > 0 {
				if _, err := fencemark.Read(t.Context(), tt.db, tt.d, tt.resource); !is(err, tt.msg) {
					t.Fatalf("Read = %v, want fence.ErrInvalidArgument saying %q", err, tt.msg)
				}
			}
		})
	}
	if _, err := fencemark.Read(t.Context(), closed, migrations.SQLite, "r"); err == nil {
		t.Fatal("Read on a closed pool succeeded: the table above proves nothing")
	}
}

// pgxStore is pgxfence on the same PostgreSQL database, for the live-holder test.
func pgxStore(t *testing.T, dsn string) *pgxfence.Store {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgxfence.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
