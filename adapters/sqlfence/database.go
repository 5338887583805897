package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
)

// database is what differs between MariaDB 10.5+ (tested on 10.11) or MySQL 8, SQLite
// 3.35+ and PostgreSQL 12+: statements (written with ?, passed through rebind; those
// on fence_tokens come from the dialect's package: internal/pgsql, mysqlsql, sqlitesql)
// and the reading of driver errors, each in its file (mysql*.go, sqlite.go, postgres.go).
type database interface {
	dialect() dialect.Dialect
	rebind(q string) string
	now() string // the database's clock, to the microsecond

	probe(ctx context.Context, s *Store) error // checks the pool once, before its first write
	isolation(l sql.IsolationLevel) error      // refuses a level it cannot fence
	fenced(ctx context.Context, s *Store, g *grant.Checked, fn func(*sql.Tx) error) error
	raise(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error    // a single grant
	raiseSet(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error // a fence.Set
	markSQL() string                                                            // a resource's mark (argument: the resource)

	update(ctx context.Context, s *Store, st *rowStmt) error
	// upsertTail makes the INSERT a fenced upsert; upserted: check means read the row back.
	upsertTail(st *rowStmt) string
	upserted(res sql.Result) (check bool, err error)

	// decrementSQL is the guarded take (n, key values..., n); take runs it once, took
	// false when it changed nothing; prepares: the Store prepares it.
	decrementSQL(table, col, where string) string
	take(ctx context.Context, db *sql.DB, sh *shape, args []any) (left int64, took bool, err error)
	prepares() bool

	keySQL() keySQL // the idempotency-key statements that differ: claim, read, purge
	ttlArg(ttl time.Duration) any
	claimed(err error) bool // a claim's error says the key is stored already

	busy(err error) bool
	duplicate(err error, table string) *nolock.DuplicateError
	missingTable(err error, table string) bool
	missingColumn(err error, column string) bool // column as given, unquoted
	replyLost(err error, commit bool) bool
	// idleEnded: err says the server ended it for idling; overdue: open past its bound.
	idleEnded(err error, commit, overdue bool) bool
}

// base is the methods two databases share; each embeds it and overrides the rest.
type base struct{}

func (base) rebind(q string) string                { return q }
func (base) probe(context.Context, *Store) error   { return nil }
func (base) isolation(sql.IsolationLevel) error    { return nil }
func (base) upserted(res sql.Result) (bool, error) { n, err := res.RowsAffected(); return n == 0, err }
func (base) prepares() bool                        { return true }
func (base) claimed(error) bool                    { return false }
func (base) idleEnded(error, bool, bool) bool      { return false }

func (base) fenced(ctx context.Context, s *Store, g *grant.Checked, fn func(*sql.Tx) error) error {
	return s.run(ctx, s.db, g, fn)
}

func (base) decrementSQL(table, col, where string) string {
	return "UPDATE " + table + " SET " + col + " = " + col + " - ? WHERE " + where + " AND " + col + " >= ? RETURNING " + col
}

func (base) take(ctx context.Context, db *sql.DB, sh *shape, args []any) (left int64, took bool, err error) {
	err = sh.queryRow(ctx, db, args).Scan(&left)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return left, err == nil, err
}

// ttlArg is a time-to-live in microseconds, or NULL: never expires.
func (base) ttlArg(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	return ttl.Microseconds()
}

// dupErr names the constraint re's first group finds in msg, doubled quotes undone.
func dupErr(err error, table string, re *regexp.Regexp, msg, doubled string) *nolock.DuplicateError {
	name := ""
	if m := re.FindStringSubmatch(msg); m != nil {
		name = m[1]
		if doubled != "" {
			name = strings.ReplaceAll(name, doubled, doubled[:1])
		}
	}
	return &nolock.DuplicateError{Table: table, Constraint: name, Err: err}
}

func newDatabase(d migrations.Dialect) (database, error) {
	switch d {
	case dialect.Postgres:
		return postgres{}, nil
	case dialect.MySQL:
		return mysql{}, nil
	case dialect.SQLite:
		return sqlite{}, nil
	}
	return nil, fmt.Errorf("sqlfence: unknown dialect %d: want migrations.Postgres, MySQL or SQLite: %w", int(d), fence.ErrInvalidArgument)
}

// findType returns the first non-nil *pkg.name in err's tree, or nil, so the MySQL and
// SQLite drivers' errors are read without importing them.
func findType(err error, pkg, name string) error {
	if t := reflect.TypeOf(err); t == nil {
		return nil
	} else if t.Kind() == reflect.Pointer && t.Elem().Name() == name && t.Elem().PkgPath() == pkg {
		if reflect.ValueOf(err).IsNil() {
			return nil
		}
		return err
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return findType(u.Unwrap(), pkg, name)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if f := findType(e, pkg, name); f != nil {
				return f
			}
		}
	}
	return nil
}
