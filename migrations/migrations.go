// Package migrations creates and drops fencegate's own tables (fence_tokens and
// idempotency_keys, and on PostgreSQL the fence_raise function pgxfence calls) with
// golang-migrate, and writes the migration that adds a token column to a table of
// the application's.
//
// The SQL lives in one folder per dialect (postgres, mysql, sqlite), embedded in the
// binary. Up records its version in its own table, fencegate_schema_migrations, so it
// never collides with the application's schema_migrations: the application keeps
// running its own golang-migrate folder as before.
//
//	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil { ... }
//
// Importing this package links golang-migrate's pgx v5, MySQL and SQLite (modernc)
// database drivers, which register themselves with database/sql and golang-migrate.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/database/mysql"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Errors returned by this package. Errors from golang-migrate and the database are
// wrapped with %w.
var (
	// ErrUnknownDialect means a Dialect value is none of Postgres, MySQL, SQLite.
	ErrUnknownDialect = errors.New("migrations: unknown dialect")
	// ErrInvalidArgument means an argument is unusable: a nil *sql.DB, an empty folder.
	ErrInvalidArgument = errors.New("migrations: invalid argument")
	// ErrInvalidTable means a table name given to the generator is empty, too long,
	// has more than one dot or contains a NUL byte or another control character.
	ErrInvalidTable = errors.New("migrations: invalid table name")
	// ErrExists means the generator would have overwritten a file, or a migration
	// adding the token column to the table is already in the folder.
	ErrExists = errors.New("migrations: migration already exists")
	// ErrDirty means an earlier run of fencegate's migrations failed half way and
	// golang-migrate marked the schema dirty; fix the database by hand, then Force.
	ErrDirty = errors.New("migrations: schema is dirty")
)

// MigrationsTable is the table in which Up and Down record fencegate's schema version.
const MigrationsTable = "fencegate_schema_migrations"

// Dialect selects the SQL folder and the golang-migrate database driver.
type Dialect int

// The supported dialects. The zero Dialect is none of them.
const (
	Postgres Dialect = iota + 1 // PostgreSQL 12 and later (pgx v5)
	MySQL                       // MySQL 8.0.16 and later, MariaDB 10.2 and later
	SQLite                      // SQLite 3.35 and later (modernc.org/sqlite)
)

// String returns the dialect's folder name: "postgres", "mysql" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// ParseDialect returns the Dialect named s ("postgres", "mysql" or "sqlite"; "pgx",
// "postgresql", "mariadb" and "sqlite3" are accepted too) or ErrUnknownDialect.
func ParseDialect(s string) (Dialect, error) {
	switch s {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, fmt.Errorf("%w %q: want postgres, mysql or sqlite", ErrUnknownDialect, s)
}

func (d Dialect) check() error {
	if d < Postgres || d > SQLite {
		return fmt.Errorf("%w: %d: want migrations.Postgres, MySQL or SQLite", ErrUnknownDialect, int(d))
	}
	return nil
}

//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var sqlFiles embed.FS

// FS returns the dialect's migration folder, for applications that run golang-migrate
// themselves (with iofs.New(fsys, ".") and MigrationsTable as the migrations table).
func FS(d Dialect) (fs.FS, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return fs.Sub(sqlFiles, d.String())
}

// Up applies every fencegate migration not yet applied to db. A database that is
// already up to date is success. ctx bounds the wait for a connection and stops Up
// between two migrations when it ends; a statement already sent runs to its end.
//
// Up borrows one connection of db for its whole run (golang-migrate's lock is tied to
// a connection) and never closes db. An in-memory SQLite database is a separate
// database per connection: give it a *sql.DB limited to one (SetMaxOpenConns(1)). It returns ErrInvalidArgument for a nil db,
// ErrUnknownDialect, ErrDirty when an earlier run failed half way, ctx's error, or the
// wrapped error of golang-migrate or the database.
func Up(ctx context.Context, db *sql.DB, d Dialect) error {
	return run(ctx, db, d, (*migrate.Migrate).Up)
}

// Down rolls back every fencegate migration, dropping fence_tokens and
// idempotency_keys with every stored token and key: a later write with any token is
// accepted again. A database without fencegate's tables is success. Errors and ctx
// are as for Up.
func Down(ctx context.Context, db *sql.DB, d Dialect) error {
	return run(ctx, db, d, (*migrate.Migrate).Down)
}

func run(ctx context.Context, db *sql.DB, d Dialect, step func(*migrate.Migrate) error) error {
	if db == nil {
		return fmt.Errorf("%w: nil *sql.DB", ErrInvalidArgument)
	}
	if err := d.check(); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %s: borrow a connection: %w", d, err)
	}
	defer conn.Close()
	return conn.Raw(func(driverConn any) error {
		// golang-migrate's drivers close the *sql.DB they are given; give them one
		// that lives on the borrowed connection only.
		shadow, err := borrow(driverConn)
		if err != nil {
			return err
		}
		defer shadow.Close()
		return migrateOn(ctx, shadow, d, step)
	})
}

func migrateOn(ctx context.Context, db *sql.DB, d Dialect, step func(*migrate.Migrate) error) error {
	fsys, err := FS(d)
	if err != nil {
		return err
	}
	src, err := iofs.New(fsys, ".")
	if err != nil {
		return fmt.Errorf("migrations: %s: read embedded migrations: %w", d, err)
	}
	var drv database.Driver
	switch d {
	case Postgres:
		drv, err = pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: MigrationsTable})
	case MySQL:
		drv, err = mysql.WithInstance(db, &mysql.Config{MigrationsTable: MigrationsTable})
	case SQLite:
		drv, err = sqlite.WithInstance(db, &sqlite.Config{MigrationsTable: MigrationsTable})
	}
	if err != nil {
		src.Close()
		return fmt.Errorf("migrations: %s: open golang-migrate driver: %w", d, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, d.String(), drv)
	if err != nil {
		src.Close()
		drv.Close()
		return fmt.Errorf("migrations: %s: %w", d, err)
	}
	defer m.Close()
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	err = step(m)
	var dirty migrate.ErrDirty
	switch {
	case errors.As(err, &dirty):
		return fmt.Errorf("%w: %s version %d in %s", ErrDirty, d, dirty.Version, MigrationsTable)
	case err != nil && !errors.Is(err, migrate.ErrNoChange):
		return fmt.Errorf("migrations: %s: %w", d, err)
	}
	// A graceful stop returns nil from golang-migrate with work left undone.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("migrations: %s: %w", d, err)
	}
	return nil
}
