// Package sqlident checks and quotes SQL identifiers, the one implementation the
// migrations generator and sqlfence share, with one set of limits per dialect.
//
// A name is refused with an error wrapping fence.ErrInvalidArgument, naming the
// name, when it is empty, not UTF-8, contains a NUL byte or is longer than the
// dialect allows (the message states the limit); every other character is quoted (the quote character doubled), never refused, so a quoted name can only
// ever name something. The limits are the databases' own:
//
//   - PostgreSQL: 63 bytes (it would silently truncate a longer name, so a longer
//     name could alter another table);
//   - MySQL/MariaDB: 64 characters (it refuses longer ones);
//   - SQLite: none of its own; 128 characters, a bound that keeps statements and
//     generated file names short.
package sqlident

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fence"
)

// Dialect selects the quoting and the limit. Its values are migrations.Dialect's
// (this package cannot import migrations, which imports it); a test checks they
// match.
type Dialect int

// The dialects, numbered as migrations.Dialect numbers them.
const (
	Postgres Dialect = iota + 1
	MySQL
	SQLite
)

// limit returns the length of name as the dialect counts it, the dialect's limit and
// how the limit reads in an error.
func (d Dialect) limit(name string) (n, limit int, unit string) {
	switch d {
	case Postgres:
		return len(name), 63, "63 bytes"
	case MySQL:
		return utf8.RuneCountInString(name), 64, "64 characters"
	}
	return utf8.RuneCountInString(name), 128, "128 characters"
}

func (d Dialect) name() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return "sqlite"
}

// Quote quotes name without checking it: MySQL with backticks, PostgreSQL and
// SQLite with double quotes, the quote character itself doubled.
func Quote(d Dialect, name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	return q + strings.ReplaceAll(name, q, q+q) + q
}

// Ident checks and quotes one identifier; what names it in the error ("column",
// "token column", ...).
func Ident(d Dialect, what, name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("fence: invalid identifier: empty %s name: %w", what, fence.ErrInvalidArgument)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("fence: invalid identifier: %s name %q is not UTF-8: %w", what, name, fence.ErrInvalidArgument)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("fence: invalid identifier: %s name %q contains a NUL byte: %w", what, name, fence.ErrInvalidArgument)
	}
	if n, limit, unit := d.limit(name); n > limit {
		return "", fmt.Errorf("fence: invalid identifier: %s name %q is longer than %s's %s: %w", what, name, d.name(), unit, fence.ErrInvalidArgument)
	}
	return Quote(d, name), nil
}

// Table checks and quotes a table name; one dot separates a schema (a PostgreSQL
// schema, a MySQL database, an attached SQLite database) from the table.
func Table(d Dialect, name string) (string, error) {
	schema, tbl, dotted := strings.Cut(name, ".")
	if !dotted {
		return Ident(d, "table", name)
	}
	if strings.Contains(tbl, ".") {
		return "", fmt.Errorf("fence: invalid identifier: table name %q has more than one dot (schema.table): %w", name, fence.ErrInvalidArgument)
	}
	qs, err := Ident(d, "schema", schema)
	if err != nil {
		return "", err
	}
	qt, err := Ident(d, "table", tbl)
	if err != nil {
		return "", err
	}
	return qs + "." + qt, nil
}
