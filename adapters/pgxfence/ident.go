package pgxfence

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
)

// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1): it silently
// truncates longer names, which could then name another table or column.
const maxIdentLen = 63

// stmt is a single-row write being built: the SQL and its parameters.
type stmt struct {
	sql  strings.Builder
	args []any
}

// placeholders holds "$1".."$64", so that building a statement does not format them.
var placeholders = func() (p [64]string) {
	for i := range p {
		p[i] = "$" + strconv.Itoa(i+1)
	}
	return p
}()

// arg adds a parameter and returns its placeholder.
func (s *stmt) arg(v any) string {
	s.args = append(s.args, v)
	if n := len(s.args); n <= len(placeholders) {
		return placeholders[n-1]
	}
	return "$" + strconv.Itoa(len(s.args))
}

// write appends parts to the statement's SQL.
func (s *stmt) write(parts ...string) {
	for _, p := range parts {
		s.sql.WriteString(p)
	}
}

// row is a fence.Row checked and quoted.
type row struct {
	table    string   // quoted, possibly schema-qualified
	keyNames []string // quoted
	keyVals  []any
	token    string // quoted token column
}

func checkIdent(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("fence: invalid identifier: empty %s name: %w", kind, fence.ErrInvalidArgument)
	case len(name) > maxIdentLen:
		return fmt.Errorf("fence: invalid identifier: %s name %.20q... is %d bytes, PostgreSQL's limit is %d: %w", kind, name, len(name), maxIdentLen, fence.ErrInvalidArgument)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("fence: invalid identifier: %s name %q contains a NUL byte: %w", kind, name, fence.ErrInvalidArgument)
	case !utf8.ValidString(name):
		return fmt.Errorf("fence: invalid identifier: %s name %q is not UTF-8: %w", kind, name, fence.ErrInvalidArgument)
	}
	return nil
}

// quoteTable quotes "table" or "schema.table" as pgx.Identifier does. A dot always
// separates schema and table: a table whose own name holds a dot cannot be named.
func quoteTable(name string) (string, error) {
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		return quoteIdent("table", name)
	}
	if strings.Contains(table, ".") {
		return "", fmt.Errorf("fence: invalid identifier: table name %q: want table or schema.table: %w", name, fence.ErrInvalidArgument)
	}
	qs, err := quoteIdent("schema", schema)
	if err != nil {
		return "", err
	}
	qt, err := quoteIdent("table", table)
	if err != nil {
		return "", err
	}
	return qs + "." + qt, nil
}

// quoteIdent checks and quotes one identifier, with the result of
// pgx.Identifier{name}.Sanitize() (double quotes, embedded ones doubled) but without
// its allocations in the common case of no embedded quote.
func quoteIdent(kind, name string) (string, error) {
	if err := checkIdent(kind, name); err != nil {
		return "", err
	}
	if !strings.Contains(name, `"`) {
		return `"` + name + `"`, nil
	}
	return pgx.Identifier{name}.Sanitize(), nil
}

// quoteColumn checks and quotes a column name.
func quoteColumn(name string) (string, error) { return quoteIdent("column", name) }

// checkRow validates r and the columns to set, and quotes every name. Key, set and
// token columns must all differ: a column named twice would make the statement
// ambiguous.
func checkRow(r fence.Row, set []fence.Col, needSet bool) (row, []string, error) {
	var out row
	var err error
	if out.table, err = quoteTable(r.Table); err != nil {
		return row{}, nil, err
	}
	if len(r.Key) == 0 {
		return row{}, nil, fmt.Errorf("%w: row of %q has no key columns", fence.ErrInvalidArgument, r.Table)
	}
	if needSet && len(set) == 0 {
		return row{}, nil, fmt.Errorf("%w: no columns to set in %q", fence.ErrInvalidArgument, r.Table)
	}
	tokenCol := r.TokenColumn
	if tokenCol == "" {
		tokenCol = fence.DefaultTokenColumn
	}
	if out.token, err = quoteIdent("token column", tokenCol); err != nil {
		return row{}, nil, err
	}
	// A handful of columns: a linear scan beats a map.
	seen := make([]string, 1, 1+len(r.Key)+len(set))
	seen[0] = tokenCol
	use := func(kind, name string) (string, error) {
		q, err := quoteIdent(kind+" column", name)
		if err != nil {
			return "", err
		}
		if slices.Contains(seen, name) {
			return "", fmt.Errorf("%w: column %q named twice (key, set and token columns must differ)", fence.ErrInvalidArgument, name)
		}
		seen = append(seen, name)
		return q, nil
	}
	for _, k := range r.Key {
		q, err := use("key", k.Name)
		if err != nil {
			return row{}, nil, err
		}
		out.keyNames = append(out.keyNames, q)
		out.keyVals = append(out.keyVals, k.Value)
	}
	setNames := make([]string, len(set))
	for i, c := range set {
		if setNames[i], err = use("set", c.Name); err != nil {
			return row{}, nil, err
		}
	}
	return out, setNames, nil
}

// where writes "k1 = $a AND k2 = $b" for the row's key.
func (r row) where(s *stmt, keyArgs []string) {
	for i, k := range r.keyNames {
		if i > 0 {
			s.sql.WriteString(" AND ")
		}
		s.write(k, " = ", keyArgs[i])
	}
}

func (r row) keyArgs(s *stmt) []string {
	out := make([]string, len(r.keyVals))
	for i, v := range r.keyVals {
		out[i] = s.arg(v)
	}
	return out
}
