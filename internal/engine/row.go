package engine

import (
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// Row is a fence.Row checked and quoted for one dialect, with the columns a write
// sets: the parts every single-row statement is built from. Values only ever travel
// as arguments.
type Row struct {
	Table   string   // quoted, possibly schema-qualified
	Token   string   // the quoted token column
	Keys    []string // quoted key columns, in r.Key's order
	KeyVals []any
	Set     []string // quoted columns to set, in order
	SetVals []any
}

// CheckRow checks r and the columns to set and quotes every name. It refuses, with
// fence.ErrInvalidArgument, no key, no column to set when needSet, an unusable name,
// and a column named twice among the token, key and set columns (in any case).
func CheckRow(d Dialect, r fence.Row, set []fence.Col, needSet bool) (Row, error) {
	var out Row
	var err error
	if out.Table, err = QuoteTable(d, r.Table); err != nil {
		return Row{}, err
	}
	if len(r.Key) == 0 {
		return Row{}, fmt.Errorf("%w: row of %q has no key columns", fence.ErrInvalidArgument, r.Table)
	}
	if needSet && len(set) == 0 {
		return Row{}, fmt.Errorf("%w: no columns to set in %q", fence.ErrInvalidArgument, r.Table)
	}
	tok := r.TokenColumn
	if tok == "" {
		tok = fence.DefaultTokenColumn
	}
	if out.Token, err = CheckIdent(d, "token column", tok); err != nil {
		return Row{}, err
	}
	names := names{d: d, seen: append(make([]string, 0, 1+len(r.Key)+len(set)), tok), first: "the token column"}
	for _, k := range r.Key {
		q, err := names.use("key column", k.Name)
		if err != nil {
			return Row{}, err
		}
		out.Keys, out.KeyVals = append(out.Keys, q), append(out.KeyVals, k.Value)
	}
	for _, c := range set {
		q, err := names.use("column", c.Name)
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

// CheckCounter checks and quotes c's names, refusing with fence.ErrInvalidArgument no
// key, an unusable name and a key column that is also the counter column or is named
// twice (in any case).
func CheckCounter(d Dialect, c nolock.Counter) (Counter, error) {
	var out Counter
	var err error
	if out.Table, err = QuoteTable(d, c.Table); err != nil {
		return Counter{}, err
	}
	if out.Column, err = CheckIdent(d, "counter column", c.Column); err != nil {
		return Counter{}, err
	}
	if len(c.Key) == 0 {
		return Counter{}, fmt.Errorf("%w: counter in %q has no key columns", fence.ErrInvalidArgument, c.Table)
	}
	names := names{d: d, seen: append(make([]string, 0, 1+len(c.Key)), c.Column), first: "the counter column"}
	for _, k := range c.Key {
		q, err := names.use("key column", k.Name)
		if err != nil {
			return Counter{}, err
		}
		out.Keys = append(out.Keys, q)
	}
	return out, nil
}

// CheckInsert checks and quotes the table and columns of an insert, refusing no
// columns and a column named twice (in any case).
func CheckInsert(d Dialect, table string, cols []fence.Col) (string, []string, error) {
	qt, err := QuoteTable(d, table)
	if err != nil {
		return "", nil, err
	}
	if len(cols) == 0 {
		return "", nil, fmt.Errorf("%w: insert into %q of no columns", fence.ErrInvalidArgument, table)
	}
	names := names{d: d, seen: make([]string, 0, len(cols))}
	out := make([]string, len(cols))
	for i, c := range cols {
		if out[i], err = names.use("column", c.Name); err != nil {
			return "", nil, err
		}
	}
	return qt, out, nil
}

// names checks and quotes a statement's column names one by one, refusing one that
// names a column already used; a handful of columns: a linear scan beats a map.
type names struct {
	d     Dialect
	seen  []string
	first string // what seen[0] is, when it was given: "the token column", ...
}

func (n *names) use(what, name string) (string, error) {
	q, err := CheckIdent(n.d, what, name)
	if err != nil {
		return "", err
	}
	for i, prev := range n.seen {
		// MySQL and SQLite compare column names case-insensitively; on PostgreSQL
		// two names that differ only in case are refused too, as ambiguous.
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
