// Package migrations creates and drops fencegate's own tables (fence_tokens and
// idempotency_keys, and on PostgreSQL the fence_raise function, which the adapters no
// longer call but earlier versions did), and
// writes the migration that adds a token column to a table of the application's.
//
// The SQL lives in one folder per dialect (postgres, mysql, sqlite), embedded in the
// binary. Up records its version in its own table, fencegate_schema_migrations
// (name it as the migrations table when running FS with golang-migrate), the way
// golang-migrate does, so it never collides with the application's
// schema_migrations: the application keeps running its own golang-migrate folder as
// before, and an application that prefers to run fencegate's folder with golang-migrate
// itself gets it from FS.
//
//	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil { ... }
//
// It imports no SQL driver and not golang-migrate: the caller's *sql.DB brings its own.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
)

// Errors returned by this package besides fence.ErrInvalidArgument (a nil *sql.DB,
// an empty folder, a Dialect that is none of Postgres, MySQL, SQLite, a table name
// the generator cannot use; the message names it). Errors from the database are
// wrapped with %w.
var (
	// ErrExists means the generator would have overwritten a file, or a migration
	// adding the token column to the table is already in the folder.
	ErrExists = errors.New("migrations: migration already exists")
	// ErrDirty means an earlier run of fencegate's migrations failed half way and
	// left the schema marked dirty (MySQL, or golang-migrate); fix the database by
	// hand, then set the version with golang-migrate's force.
	ErrDirty = errors.New("migrations: schema is dirty")
)

// migrationsTable is the table in which Up and Down record fencegate's schema version.
const migrationsTable = "fencegate_schema_migrations"

// Dialect names a database for the whole library: it selects the SQL folder and how
// the version is recorded here, and the SQL sqlfence and fencemark write. This
// package imports no driver, so any user can name a dialect without linking one.
// Its String is the folder name: "postgres", "mysql" or "sqlite".
type Dialect = dialect.Dialect

// The supported dialects. The zero Dialect is none of them.
const (
	Postgres = dialect.Postgres // PostgreSQL 12 and later (pgx v5)
	MySQL    = dialect.MySQL    // MySQL 8.0.16 and later, MariaDB 10.2 and later
	SQLite   = dialect.SQLite   // SQLite 3.35 and later (modernc.org/sqlite)
)

// ParseDialect returns the Dialect named s ("postgres", "mysql" or "sqlite"; "pgx",
// "postgresql", "mariadb" and "sqlite3" are accepted too), or for any other s an error wrapping
// fence.ErrInvalidArgument that names it.
func ParseDialect(s string) (Dialect, error) {
	switch s {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, fmt.Errorf("migrations: unknown dialect %q: want postgres, mysql or sqlite: %w", s, fence.ErrInvalidArgument)
}

func check(d Dialect) error {
	if d < Postgres || d > SQLite {
		return fmt.Errorf("migrations: unknown dialect %d: want migrations.Postgres, MySQL or SQLite: %w", int(d), fence.ErrInvalidArgument)
	}
	return nil
}

//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var sqlFiles embed.FS

// FS returns the dialect's migration folder, for applications that run golang-migrate
// themselves (with iofs.New(fsys, ".") and fencegate_schema_migrations as the
// migrations table). An unknown d is an error wrapping fence.ErrInvalidArgument.
func FS(d Dialect) (fs.FS, error) {
	if err := check(d); err != nil {
		return nil, err
	}
	return fs.Sub(sqlFiles, d.String())
}

// Up applies every fencegate migration not yet applied to db. A database that is
// already up to date is success. ctx bounds the wait for a connection and the lock,
// and stops Up between two migrations when it ends; a statement already sent runs to
// its end.
//
// Up borrows one connection of db for its whole run and never closes db. It takes
// the lock golang-migrate takes for fencegate_schema_migrations (PostgreSQL: an advisory lock;
// MySQL: GET_LOCK), so concurrent runs wait for each other. On PostgreSQL and SQLite
// each migration and its version commit together; on MySQL, whose DDL commits as it
// runs, the version is marked dirty around each migration. An in-memory SQLite
// database is a separate database per connection: give it a *sql.DB limited to one
// (SetMaxOpenConns(1)). It returns fence.ErrInvalidArgument for a nil db or an
// unknown dialect, ErrDirty when an earlier run failed half way, ctx's error, or the
// wrapped error of the database.
func Up(ctx context.Context, db *sql.DB, d Dialect) error {
	return run(ctx, db, d, true)
}

// Down rolls back every fencegate migration, dropping fence_tokens and
// idempotency_keys with every stored token and key: a later write with any token is
// accepted again. A database without fencegate's tables is success. Errors and ctx
// are as for Up.
func Down(ctx context.Context, db *sql.DB, d Dialect) error {
	return run(ctx, db, d, false)
}

func run(ctx context.Context, db *sql.DB, d Dialect, up bool) error {
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", fence.ErrInvalidArgument)
	}
	if err := check(d); err != nil {
		return err
	}
	fsys, err := FS(d)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %s: borrow a connection: %w", d, err)
	}
	defer conn.Close()
	m := &migrator{d: d, conn: conn, fsys: fsys}
	if err := m.run(ctx, up); err != nil {
		if errors.Is(err, ErrDirty) {
			return err
		}
		return fmt.Errorf("migrations: %s: %w", d, err)
	}
	return nil
}
