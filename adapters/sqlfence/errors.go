package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"regexp"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// The package reads the errors of github.com/go-sql-driver/mysql (*mysql.MySQLError)
// and modernc.org/sqlite (*sqlite.Error) without importing either driver, so that a
// program on one database links no other's driver: the errors are found by their
// type's package and name, and read by their fields (MySQL) or method (SQLite).
const (
	mysqlPkg  = "github.com/go-sql-driver/mysql"
	sqlitePkg = "modernc.org/sqlite"
)

// mysqlError is what the package reads of a *mysql.MySQLError.
type mysqlError struct {
	Number   uint16
	SQLState string
	Message  string
}

// asMySQL returns the first *mysql.MySQLError in err's tree.
func asMySQL(err error) (mysqlError, bool) {
	e := findType(err, mysqlPkg, "MySQLError")
	if e == nil {
		return mysqlError{}, false
	}
	v := reflect.ValueOf(e).Elem()
	num, state, msg := v.FieldByName("Number"), v.FieldByName("SQLState"), v.FieldByName("Message")
	if !num.IsValid() || num.Kind() != reflect.Uint16 || !msg.IsValid() || msg.Kind() != reflect.String {
		return mysqlError{}, false
	}
	me := mysqlError{Number: uint16(num.Uint()), Message: msg.String()}
	if state.IsValid() && state.Kind() == reflect.Array && state.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, state.Len())
		for i := range b {
			b[i] = byte(state.Index(i).Uint())
		}
		me.SQLState = string(b)
	}
	return me, true
}

// sqliteError returns the first *sqlite.Error in err's tree: its result code (with
// the extended bits) and message.
func sqliteError(err error) (code int, msg string, ok bool) {
	e := findType(err, sqlitePkg, "Error")
	c, isCoder := e.(interface{ Code() int })
	if !isCoder {
		return 0, "", false
	}
	return c.Code(), e.Error(), true
}

// findType returns the first error in err's tree (as errors.As walks it) that is a
// pointer to the named type of package pkg, or nil.
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

// replyLost reports whether err, from a COMMIT or from a write sent outside a
// transaction, leaves the outcome unknown: the statement was (or may have been) sent
// and no answer of the server's decides it.
//
// Decided: errors database/sql or the driver raise before sending (driver.ErrBadConn,
// a done Tx or Conn, ctx's own error returned unwrapped by database/sql when ctx ended
// before the COMMIT went out), the server's error replies, and every SQLite error
// (its COMMIT runs in this process: its error is the engine's answer, never a lost
// reply). Undecided: a broken or closed connection (mysql.ErrInvalidConn, EOF, a
// network error, ctx ending while the reply was awaited) and the replies that end the
// session, which may come after the commit was recorded: MariaDB's "connection was
// killed" (1927) and "server shutdown" (1053), PostgreSQL's classes 08 (connection
// exception) and 57P (operator intervention: a terminated backend).
func replyLost(err error, commit bool) bool {
	if err == nil {
		return false
	}
	if me, ok := asMySQL(err); ok {
		return me.Number == 1927 || me.Number == 1053
	}
	switch {
	case findType(err, sqlitePkg, "Error") != nil:
		return false
	case sqlState(err) != "":
		st := sqlState(err)
		return strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P")
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrTxDone), errors.Is(err, sql.ErrConnDone):
		return false
	case commit && (err == context.Canceled || err == context.DeadlineExceeded):
		// Tx.Commit checks ctx before sending; a driver that reads the reply under
		// ctx wraps its error.
		return false
	}
	return true
}

// unknownOutcome returns fence.ErrCommitUnknown for err when its reply was lost,
// or nil.
func unknownOutcome(op string, g fence.Grant, err error, commit bool) error {
	if !replyLost(err, commit) {
		return nil
	}
	return engine.CommitUnknown(g, op, err)
}

// The names in unique-key violation messages: PostgreSQL's constraint, SQLite's
// columns ("UNIQUE constraint failed: t.a, t.b"), MySQL's index.
var (
	pgUniqueRE     = regexp.MustCompile(`unique constraint "((?:[^"]|"")*)"`)
	sqliteUniqueRE = regexp.MustCompile(`(?:UNIQUE|PRIMARY KEY) constraint failed: ([^(]*?)\s*(?:\(\d+\))?$`)
	mysqlDupKeyRE  = regexp.MustCompile(`for key '((?:[^']|'')*)'`)
)

// asDuplicate maps a unique-key violation to a *nolock.DuplicateError naming the
// index (MySQL) or the columns (SQLite, whose message names no index), or returns nil
// when err is not one.
func asDuplicate(err error, table string) *nolock.DuplicateError {
	if me, ok := asMySQL(err); ok && me.Number == 1062 {
		name := ""
		if m := mysqlDupKeyRE.FindStringSubmatch(me.Message); m != nil {
			// MySQL 8 says 'table.index', MariaDB 'index'.
			name = strings.ReplaceAll(m[1], "''", "'")
			name = strings.TrimPrefix(name, lastPart(table)+".")
		}
		return &nolock.DuplicateError{Table: table, Constraint: name, Err: err}
	}
	if code, msg, ok := sqliteError(err); ok && (code == 2067 || code == 1555) { // SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY
		name := ""
		if m := sqliteUniqueRE.FindStringSubmatch(msg); m != nil {
			name = m[1]
		}
		return &nolock.DuplicateError{Table: table, Constraint: name, Err: err}
	}
	if sqlState(err) == "23505" {
		name := ""
		if m := pgUniqueRE.FindStringSubmatch(err.Error()); m != nil {
			name = strings.ReplaceAll(m[1], `""`, `"`)
		}
		return &nolock.DuplicateError{Table: table, Constraint: name, Err: err}
	}
	return nil
}

// sqlState returns the SQLSTATE of a PostgreSQL driver's error (pgx's *pgconn.PgError
// and lib/pq's *pq.Error both have the method), or "".
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

func lastPart(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}

// busy reports whether err means another writer held a lock and the whole
// transaction may be tried again: SQLITE_BUSY and SQLITE_LOCKED (any extended
// code), MySQL 1213 (deadlock, transaction rolled back) and 1205 (lock wait timeout),
// PostgreSQL 40001 (serialization failure: under REPEATABLE READ or SERIALIZABLE a
// newer transaction raised the fence row after this one's snapshot), 40P01
// (deadlock) and 55P03 (lock not available).
func busy(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01", "55P03":
		return true
	}
	if code, _, ok := sqliteError(err); ok {
		c := code & 0xff
		return c == 5 || c == 6
	}
	if me, ok := asMySQL(err); ok {
		return me.Number == 1213 || me.Number == 1205
	}
	return false
}

// missingSchema reports whether err says the fence_tokens table does not exist.
func missingSchema(err error) bool { return missingTable(err, "fence_tokens") }

// missingTable reports whether err says the table does not exist (MySQL 1146, SQLite
// "no such table", PostgreSQL 42P01).
func missingTable(err error, table string) bool {
	if sqlState(err) == "42P01" {
		return strings.Contains(err.Error(), table)
	}
	if me, ok := asMySQL(err); ok {
		return me.Number == 1146 && strings.Contains(me.Message, table)
	}
	_, msg, ok := sqliteError(err)
	return ok && strings.Contains(msg, "no such table: "+table)
}
