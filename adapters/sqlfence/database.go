package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// database is what differs between the databases a Store speaks to. Every statement
// whose text or argument order differs, and every reading of a driver's errors, sits
// in its database's file (postgres.go, mysql.go, sqlite.go); the rest of the package
// is one code path over this interface. Statements are written with ? placeholders
// and passed through rebind.
//
//   - MySQL is MariaDB 10.5 and later (tested on 10.11) or MySQL 8 through
//     github.com/go-sql-driver/mysql; the connection must report matched rows
//     (clientFoundRows=true), which probe checks.
//   - SQLite is SQLite 3.35 and later through modernc.org/sqlite (driver name
//     "sqlite"); see sqlfence/sqlite's Open for what concurrent writers need.
//   - PostgreSQL is PostgreSQL 12 and later through a database/sql driver such as
//     github.com/jackc/pgx/v5/stdlib; its raise is pgxfence's (internal/engine).
type database interface {
	dialect() engine.Dialect
	rebind(q string) string
	now() string // the database's clock, to the microsecond

	// fenced is Fenced after the door's checks: begin, raise, fn, commit.
	fenced(ctx context.Context, s *Store, g *engine.Checked, fn func(*sql.Tx) error) error
	// probe checks the pool once before its first write.
	probe(ctx context.Context, s *Store) error
	// isolation refuses a level the database cannot give a fenced transaction.
	isolation(l sql.IsolationLevel) error

	// raise raises a single grant's fence row inside tx (set.go raises a set).
	raise(ctx context.Context, s *Store, tx *sql.Tx, g *engine.Checked) error
	// raiseSetTail ends the multi-row fence-row INSERT of a set; countsRaised reports
	// that its row count says whether every row was raised.
	raiseSetTail() string
	countsRaised() bool

	// update is Store.Update after the checks.
	update(ctx context.Context, s *Store, st *rowStmt) error
	// upsertTail turns the INSERT of key, set and token columns into a fenced upsert;
	// upserted reads its result: check means the row must be read back.
	upsertTail(st *rowStmt) string
	upserted(res sql.Result) (check bool, err error)

	// decrementSQL is the guarded take. Arguments: n, key values..., n. take runs
	// sh's once; took is false when it changed nothing. prepares reports whether a
	// Store prepares it.
	decrementSQL(table, col, where string) string
	take(ctx context.Context, db *sql.DB, sh *shape, args []any) (left int64, took bool, err error)
	prepares() bool

	// The idempotency-key statements that differ (once.go has the rest). claimed
	// reports that a claim's error means the key is already stored.
	claimKeySQL() string
	readKeySQL() string
	purgeKeysSQL() string
	ttlArg(ttl time.Duration) any
	claimed(err error) bool

	// How the driver reports what the package acts on.
	busy(err error) bool
	duplicate(err error, table string) *nolock.DuplicateError
	missingTable(err error, table string) bool
	replyLost(err error, commit bool) bool
	// idleEnded reports that err says the server ended the transaction for idling;
	// overdue that it was open at least its idle timeout.
	idleEnded(err error, commit, overdue bool) bool
}

// newDatabase returns the database of dialect d.
func newDatabase(d migrations.Dialect) (database, error) {
	switch d {
	case engine.Postgres:
		return postgres{}, nil
	case engine.MySQL:
		return mysql{}, nil
	case engine.SQLite:
		return sqlite{}, nil
	}
	return nil, fmt.Errorf("sqlfence: unknown dialect %d: want migrations.Postgres, MySQL or SQLite: %w", int(d), fence.ErrInvalidArgument)
}

// findType returns the first error in err's tree (as errors.As walks it) that is a
// pointer to the named type of package pkg, or nil. The package reads the errors of
// github.com/go-sql-driver/mysql and modernc.org/sqlite this way, without importing
// either driver, so a program on one database links no other's driver.
func findType(err error, pkg, name string) error {
	for err != nil {
		if t := reflect.TypeOf(err); t.Kind() == reflect.Pointer && t.Elem().Name() == name && t.Elem().PkgPath() == pkg {
			if reflect.ValueOf(err).IsNil() {
				return nil
			}
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if f := findType(e, pkg, name); f != nil {
					return f
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}
