package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	mysqlmigrate "github.com/golang-migrate/migrate/v4/database/mysql"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/database/sqlite"
	_ "github.com/golang-migrate/migrate/v4/source/file"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql/mysqltest"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

var (
	postgres = pgtest.New()
	mariadb  = mysqltest.New()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := postgres.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if err := mariadb.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// dialectDB opens a fresh, empty database of one dialect.
type dialectDB struct {
	d migrations.Dialect
	// open returns a fresh, empty database and a function opening another handle
	// to the same database.
	open func(t *testing.T) (*sql.DB, func(t *testing.T) *sql.DB)
	// tables lists the library's tables and functions present, by name.
	objects func(t *testing.T, db *sql.DB) map[string]bool
	// driver is golang-migrate's driver keeping its version in table
	// ("": golang-migrate's default, schema_migrations).
	driver func(t *testing.T, db *sql.DB, table string) database.Driver
}

func opener(driver, dsn string) func(t *testing.T) *sql.DB {
	return func(t *testing.T) *sql.DB {
		t.Helper()
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
}

func openPostgres(t *testing.T) (*sql.DB, func(t *testing.T) *sql.DB) {
	again := opener("pgx", postgres.DSN(t))
	return again(t), again
}

func openMySQL(t *testing.T) (*sql.DB, func(t *testing.T) *sql.DB) {
	again := opener("mysql", mariadb.DSN(t))
	return again(t), again
}

func openSQLite(t *testing.T) (*sql.DB, func(t *testing.T) *sql.DB) {
	again := opener("sqlite", filepath.Join(t.TempDir(), "app.db"))
	return again(t), again
}

func names(t *testing.T, db *sql.DB, q string) map[string]bool {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[n] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var dialects = []dialectDB{
	{
		d:    migrations.Postgres,
		open: openPostgres,
		objects: func(t *testing.T, db *sql.DB) map[string]bool {
			return names(t, db, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()
				UNION ALL SELECT proname || '()' FROM pg_proc WHERE pronamespace = current_schema()::regnamespace`)
		},
		driver: func(t *testing.T, db *sql.DB, table string) database.Driver {
			drv, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: table})
			if err != nil {
				t.Fatal(err)
			}
			return drv
		},
	},
	{
		d:    migrations.MySQL,
		open: openMySQL,
		objects: func(t *testing.T, db *sql.DB) map[string]bool {
			return names(t, db, `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`)
		},
		driver: func(t *testing.T, db *sql.DB, table string) database.Driver {
			drv, err := mysqlmigrate.WithInstance(db, &mysqlmigrate.Config{MigrationsTable: table})
			if err != nil {
				t.Fatal(err)
			}
			return drv
		},
	},
	{
		d:    migrations.SQLite,
		open: openSQLite,
		objects: func(t *testing.T, db *sql.DB) map[string]bool {
			return names(t, db, `SELECT name FROM sqlite_master WHERE type = 'table'`)
		},
		driver: func(t *testing.T, db *sql.DB, table string) database.Driver {
			drv, err := sqlite.WithInstance(db, &sqlite.Config{MigrationsTable: table})
			if err != nil {
				t.Fatal(err)
			}
			return drv
		},
	},
}

func TestUp_upDownUp(t *testing.T) {
	for _, dd := range dialects {
		t.Run(dd.d.String(), func(t *testing.T) {
			ctx := t.Context()
			db, _ := dd.open(t)
			want := []string{"fence_tokens", "idempotency_keys", migrationsTable}
			if dd.d == migrations.Postgres {
				want = append(want, "fence_raise()")
			}
			check := func(stage string, present bool) {
				t.Helper()
				got := dd.objects(t, db)
				for _, n := range want {
					if n == migrationsTable {
						continue // golang-migrate keeps its table after Down
					}
					if got[n] != present {
						t.Fatalf("%s: %s present = %v, want %v (have %v)", stage, n, got[n], present, got)
					}
				}
				if got["schema_migrations"] {
					t.Fatalf("%s: Up created schema_migrations; it must use %s", stage, migrationsTable)
				}
			}
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatalf("Up() = %v", err)
			}
			check("after Up", true)
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatalf("second Up() = %v, want nil (no change is success)", err)
			}
			// The tables work as the adapters use them.
			if _, err := db.ExecContext(ctx, `INSERT INTO fence_tokens (resource, token) VALUES ('account-42', 34)`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO fence_tokens (resource, token) VALUES ('account-42', 35)`); err == nil {
				t.Fatal("fence_tokens accepted a second row for one resource")
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO fence_tokens (resource, token) VALUES ('zero', 0)`); err == nil {
				t.Fatal("fence_tokens accepted token 0")
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO idempotency_keys (idem_key, fingerprint, result) VALUES ('k', 'fp', NULL)`); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Down(ctx, db, dd.d); err != nil {
				t.Fatalf("Down() = %v", err)
			}
			check("after Down", false)
			if err := migrations.Down(ctx, db, dd.d); err != nil {
				t.Fatalf("second Down() = %v, want nil", err)
			}
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatalf("Up() after Down = %v", err)
			}
			check("after Up again", true)
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM fence_tokens").Scan(&n); err != nil || n != 0 {
				t.Fatalf("fence_tokens after Down and Up holds %d rows (%v), want 0", n, err)
			}
			// Up borrowed a connection and gave it back: the caller's db still works.
			if err := db.PingContext(ctx); err != nil {
				t.Fatalf("caller's *sql.DB after Up: %v", err)
			}
		})
	}
}

// TestUp_besideApplicationMigrations runs the application's own golang-migrate folder
// (schema_migrations) and fencegate's on one database; neither moves the other.
func TestUp_besideApplicationMigrations(t *testing.T) {
	for _, dd := range dialects {
		t.Run(dd.d.String(), func(t *testing.T) {
			ctx := t.Context()
			db, again := dd.open(t)
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "1_create_invoices.up.sql"), "CREATE TABLE invoices (account BIGINT PRIMARY KEY, total BIGINT NOT NULL);")
			writeFile(t, filepath.Join(dir, "1_create_invoices.down.sql"), "DROP TABLE invoices;")
			app := appMigrate(t, dd, again(t), dir)
			if err := app.Up(); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Up(ctx, db, dd.d); err != nil {
				t.Fatal(err)
			}
			if v, dirty, err := app.Version(); err != nil || v != 1 || dirty {
				t.Fatalf("application version = %d (dirty %v, %v) after fencegate's Up, want 1", v, dirty, err)
			}
			if err := migrations.Down(ctx, db, dd.d); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO invoices VALUES (42, 100)"); err != nil {
				t.Fatalf("application table after fencegate's Down: %v", err)
			}
		})
	}
}

func TestUp_badInput(t *testing.T) {
	db, _ := openSQLite(t)
	ctx := t.Context()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name string
		call func() error
		want error
		msg  string // what the error must say
	}{
		{"nil db", func() error { return migrations.Up(ctx, nil, migrations.SQLite) }, fence.ErrInvalidArgument, "nil *sql.DB"},
		{"zero dialect", func() error { return migrations.Up(ctx, db, 0) }, fence.ErrInvalidArgument, "unknown dialect 0"},
		{"unknown dialect", func() error { return migrations.Up(ctx, db, migrations.Dialect(9)) }, fence.ErrInvalidArgument, "unknown dialect 9"},
		{"down unknown dialect", func() error { return migrations.Down(ctx, db, migrations.Dialect(-1)) }, fence.ErrInvalidArgument, "unknown dialect -1"},
		{"cancelled context", func() error { return migrations.Up(cancelled, db, migrations.SQLite) }, context.Canceled, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error = %v, want %v saying %q", err, tt.want, tt.msg)
			}
		})
	}
	if got := names(t, db, `SELECT name FROM sqlite_master WHERE type = 'table'`); got["fence_tokens"] {
		t.Fatal("a refused Up created tables")
	}
}

func TestParseDialect(t *testing.T) {
	for in, want := range map[string]migrations.Dialect{"postgres": migrations.Postgres, "pgx": migrations.Postgres,
		"mysql": migrations.MySQL, "mariadb": migrations.MySQL, "sqlite": migrations.SQLite} {
		if got, err := migrations.ParseDialect(in); err != nil || got != want {
			t.Errorf("ParseDialect(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "oracle", "Postgres "} {
		want := fmt.Sprintf("migrations: unknown dialect %q", in)
		if _, err := migrations.ParseDialect(in); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDialect(%q) = %v, want fence.ErrInvalidArgument saying %q", in, err, want)
		}
	}
}

func TestFS(t *testing.T) {
	for _, d := range []migrations.Dialect{migrations.Postgres, migrations.MySQL, migrations.SQLite} {
		fsys, err := migrations.FS(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"1_create_fence_tokens.up.sql", "1_create_fence_tokens.down.sql",
			"2_create_idempotency_keys.up.sql", "2_create_idempotency_keys.down.sql"} {
			if _, err := fsys.Open(f); err != nil {
				t.Errorf("%s: %v", d, err)
			}
		}
	}
	if _, err := migrations.FS(0); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown dialect 0") {
		t.Fatalf("FS(0) = %v", err)
	}
}

// appMigrate runs an application's own migration folder the usual golang-migrate way
// (schema_migrations), on a handle of its own: golang-migrate closes it.
func appMigrate(t *testing.T, dd dialectDB, own *sql.DB, dir string) *migrate.Migrate {
	t.Helper()
	m, err := migrate.NewWithDatabaseInstance("file://"+dir, dd.d.String(), dd.driver(t, own, ""))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
