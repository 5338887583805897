package pgsql

import (
	"strconv"
	"strings"
)

// The single-row writes (fence.Row) in one statement each, over quoted names: a CTE
// (an InitPlan, run before any target row is locked, as Fenced locks) raises the fence
// row, then the write runs only if it did.

// UpdateSQL is the single-row Update. bump raises an existing fence row by a plain
// UPDATE (a no-op without one). Arguments: the resource, the token, the set values,
// the key values.
func UpdateSQL(table, tok string, keys, set []string, bump bool) string {
	vals := Params(3, len(set))
	match := Eqs(keys, Params(3+len(set), len(keys))) + " AND " + tok + " <= $2"
	exists := "EXISTS (SELECT 1 FROM " + table + " WHERE " + match + ")"
	var b strings.Builder
	b.Grow(320 + len(table) + 16*(len(set)+len(keys)))
	if bump {
		b.WriteString(BumpCTE("$1", "$2", exists))
	} else {
		b.WriteString(FenceCTE("$1", "$2", exists))
	}
	b.WriteString("UPDATE " + table + " SET ")
	for i := range set {
		b.WriteString(set[i] + " = " + vals[i] + ", ")
	}
	b.WriteString(tok + " = $2 WHERE " + match + " AND EXISTS (SELECT 1 FROM fencegate_raised)")
	return b.String()
}

// UpsertSQL is the single-row Upsert, INSERT ... ON CONFLICT on the key; a row holding
// a higher token leaves the fence row as it was. Arguments: the resource, the token,
// the key values, the set values.
func UpsertSQL(table, tok string, keys, set []string) string {
	kp, vp := Params(3, len(keys)), Params(3+len(keys), len(set))
	var b strings.Builder
	b.WriteString(FenceCTE("$1", "$2", "NOT EXISTS (SELECT 1 FROM "+table+" WHERE "+Eqs(keys, kp)+" AND "+tok+" > $2)"))
	cols := append(append(append([]string{}, keys...), set...), tok)
	b.WriteString("INSERT INTO " + table + " AS fencegate_target (" + strings.Join(cols, ", ") + ") SELECT ")
	b.WriteString(strings.Join(append(append(kp, vp...), "$2"), ", "))
	b.WriteString(" WHERE EXISTS (SELECT 1 FROM fencegate_raised) ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET ")
	for _, c := range set {
		b.WriteString(c + " = EXCLUDED." + c + ", ")
	}
	b.WriteString(tok + " = EXCLUDED." + tok + " WHERE fencegate_target." + tok + " <= EXCLUDED." + tok)
	return b.String()
}

// DeleteSQL is the single-row Delete; a key of several rows deletes none. Arguments:
// the resource, the token, the key values.
func DeleteSQL(table, tok string, keys []string) string {
	one := Eqs(keys, Params(3, len(keys)))
	match := one + " AND " + tok + " <= $2"
	return FenceCTE("$1", "$2", "EXISTS (SELECT 1 FROM "+table+" WHERE "+match+
		") AND (SELECT count(*) FROM "+table+" WHERE "+one+") = 1") +
		"DELETE FROM " + table + " WHERE " + match + " AND EXISTS (SELECT 1 FROM fencegate_raised)"
}

// ExplainSQL reads why a single-row write changed nothing: the row's token (NULL: no
// row), how many rows the key picks, and the resource's mark (NULL: none). Arguments:
// the key values, the resource.
func ExplainSQL(table, tok string, keys []string) string {
	match := Eqs(keys, Params(1, len(keys)))
	return "SELECT (SELECT max(" + tok + ") FROM " + table + " WHERE " + match + "), (SELECT count(*) FROM " +
		table + " WHERE " + match + "), (" + Mark("$"+strconv.Itoa(len(keys)+1)) + ")"
}

// Params returns the placeholders $from.. of n parameters.
func Params(from, n int) []string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(from+i)
	}
	return ps
}

// Eqs is "k1 = $a AND k2 = $b" for the names and their placeholders.
func Eqs(names, ps []string) string {
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(k + " = " + ps[i])
	}
	return b.String()
}
