package dialect

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// Row is a fence.Row checked and quoted for one dialect, with the columns a write sets.
// Values only ever travel as arguments.
type Row struct {
	Table   string   // quoted, possibly schema-qualified
	Token   string   // the quoted token column
	Keys    []string // quoted key columns, in r.Key's order
	KeyVals []any
	Set     []string // quoted columns to set, in order
	SetVals []any
}

// CheckRow checks and quotes r and set, refusing (fence.ErrInvalidArgument) no key, no
// set when needSet, an unusable name, and a column named twice in any case.
func CheckRow(d Dialect, r fence.Row, set []fence.Col, needSet bool) (Row, error) {
	tok := r.TokenColumn
	if tok == "" {
		tok = fence.DefaultTokenColumn
	}
	var out Row
	var n names
	var err error
	if out.Table, out.Token, out.Keys, n, err = checkKeyed(d, "row of", r.Table, "token column", tok, r.Key); err != nil {
		return Row{}, err
	}
	if needSet && len(set) == 0 {
		return Row{}, fmt.Errorf("%w: no columns to set in %q", fence.ErrInvalidArgument, r.Table)
	}
	for _, k := range r.Key {
		out.KeyVals = append(out.KeyVals, k.Value)
	}
	for _, c := range set {
		q, err := n.use("column", c.Name)
		if err != nil {
			return Row{}, err
		}
		out.Set, out.SetVals = append(out.Set, q), append(out.SetVals, c.Value)
	}
	return out, nil
}

// Counter is a nolock.Counter checked and quoted for one dialect.
type Counter struct {
	Table, Column string   // quoted
	Keys          []string // quoted key columns, in c.Key's order
}

// CheckCounter checks and quotes c's names, refusing (fence.ErrInvalidArgument) no key,
// an unusable name, and a key column named twice or like the counter, in any case.
func CheckCounter(d Dialect, c nolock.Counter) (Counter, error) {
	t, col, keys, _, err := checkKeyed(d, "counter in", c.Table, "counter column", c.Column, c.Key)
	return Counter{Table: t, Column: col, Keys: keys}, err
}

// checkKeyed checks and quotes a table, its token or counter column and its key
// columns; the names returned go on checking the rest.
func checkKeyed(d Dialect, of, table, role, col string, key []fence.Col) (string, string, []string, names, error) {
	qt, err := QuoteTable(d, table)
	if err != nil {
		return "", "", nil, names{}, err
	}
	if len(key) == 0 {
		return "", "", nil, names{}, fmt.Errorf("%w: %s %q has no key columns", fence.ErrInvalidArgument, of, table)
	}
	qc, err := CheckIdent(d, role, col)
	if err != nil {
		return "", "", nil, names{}, err
	}
	n := names{d: d, seen: append(make([]string, 0, 4+len(key)), col), first: "the " + role}
	keys := make([]string, len(key))
	for i, k := range key {
		if keys[i], err = n.use("key column", k.Name); err != nil {
			return "", "", nil, names{}, err
		}
	}
	return qt, qc, keys, n, nil
}

// CheckInsert checks and quotes an insert's table and columns, refusing none and
// a column named twice, in any case.
func CheckInsert(d Dialect, table string, cols []fence.Col) (string, []string, error) {
	qt, err := QuoteTable(d, table)
	if err != nil {
		return "", nil, err
	}
	if len(cols) == 0 {
		return "", nil, fmt.Errorf("%w: insert into %q of no columns", fence.ErrInvalidArgument, table)
	}
	n := names{d: d, seen: make([]string, 0, len(cols))}
	out := make([]string, len(cols))
	for i, c := range cols {
		if out[i], err = n.use("column", c.Name); err != nil {
			return "", nil, err
		}
	}
	return qt, out, nil
}

// names checks and quotes a statement's columns, refusing one already used (a linear
// scan: a handful of columns).
type names struct {
	d     Dialect
	seen  []string
	first string // what seen[0] is, when given: "the token column", ...
}

func (n *names) use(what, name string) (string, error) {
	q, err := CheckIdent(n.d, what, name)
	if err != nil {
		return "", err
	}
	for i, prev := range n.seen {
		// MySQL and SQLite ignore case in column names; PostgreSQL refuses too (ambiguous).
		if strings.EqualFold(prev, name) {
			role := "another column"
			if i == 0 && n.first != "" {
				role = n.first
			}
			return "", fmt.Errorf("%w: %s %q is also %s", fence.ErrInvalidArgument, what, name, role)
		}
	}
	n.seen = append(n.seen, name)
	return q, nil
}
