// Package dialect checks and quotes what the SQL adapters and migrations put into a
// statement for each database: identifiers (quoted, never concatenated), a fence.Row's
// or nolock.Counter's names, and the bounded ShapeMap that caches a statement per shape
// of names. Values never pass through it: they travel as arguments.
package dialect

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fence"
)

// Dialect names a database: the migrations' SQL folder, quoting and limits, and the
// adapters' SQL. The zero Dialect is none.
type Dialect int

// The supported dialects.
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

// limit returns name's length as d counts it, d's limit, and the limit as an error says it.
func (d Dialect) limit(name string) (n, limit int, unit string) {
	switch d {
	case Postgres:
		return len(name), 63, "63 bytes"
	case MySQL:
		return utf8.RuneCountInString(name), 64, "64 characters"
	}
	return utf8.RuneCountInString(name), 128, "128 characters"
}

// QuoteIdent quotes name without checking it: MySQL with backticks, PostgreSQL and
// SQLite with double quotes, the quote character itself doubled.
func QuoteIdent(d Dialect, name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	return q + strings.ReplaceAll(name, q, q+q) + q
}

// CheckIdent checks and quotes one identifier; what names it in errors ("column", ...).
func CheckIdent(d Dialect, what, name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("fence: invalid identifier: empty %s name: %w", what, fence.ErrInvalidArgument)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("fence: invalid identifier: %s name %q is not UTF-8: %w", what, name, fence.ErrInvalidArgument)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("fence: invalid identifier: %s name %q contains a NUL byte: %w", what, name, fence.ErrInvalidArgument)
	}
	if n, limit, unit := d.limit(name); n > limit {
		return "", fmt.Errorf("fence: invalid identifier: %s name %q is longer than %s's %s: %w", what, name, d.String(), unit, fence.ErrInvalidArgument)
	}
	return QuoteIdent(d, name), nil
}

// QuoteTable checks and quotes a table name; one dot separates a schema (or MySQL
// database, attached SQLite database) from the table.
func QuoteTable(d Dialect, name string) (string, error) {
	schema, tbl, dotted := strings.Cut(name, ".")
	if !dotted {
		return CheckIdent(d, "table", name)
	}
	if strings.Contains(tbl, ".") {
		return "", fmt.Errorf("fence: invalid identifier: table name %q has more than one dot (schema.table): %w", name, fence.ErrInvalidArgument)
	}
	qs, err := CheckIdent(d, "schema", schema)
	if err != nil {
		return "", err
	}
	qt, err := CheckIdent(d, "table", tbl)
	if err != nil {
		return "", err
	}
	return qs + "." + qt, nil
}

// NoTokenColumn is a single-row write's error on a table that lacks its token column:
// it names the migration that adds it, matches fence.ErrSchema (without repeating its
// text) and wraps the driver's err.
func NoTokenColumn(d Dialect, adapter, op, table, column string, err error) error {
	return &schemaError{msg: fmt.Sprintf("%s: %s %q: no token column %q: add it with the migration "+
		"fencegate-migrate gen -dir DIR -table %s -dialect %s writes (migrations.GenerateTokenColumn)",
		adapter, op, table, column, table, d), err: err}
}

type schemaError struct {
	msg string
	err error
}

func (e *schemaError) Error() string   { return e.msg + ": " + e.err.Error() }
func (e *schemaError) Unwrap() []error { return []error{fence.ErrSchema, e.err} }
