// Package mysqlsql is MySQL's and MariaDB's side of a fenced write, written once for
// sqlfence, fencemark and fencectl: every statement on fence_tokens (the raise, the set
// raise, the single-row Update's join, the mark's reads, the operator's raise and
// list), with its arguments in order. With no UPDATE ... RETURNING, a statement hands
// a value back as LAST_INSERT_ID(expr), reported with the row count; ON DUPLICATE KEY
// assignments run left to right, each seeing the ones before. A fenced raise is BumpSQL,
// then RaiseSQL when the bump matched no row (counted as matched: clientFoundRows).
package mysqlsql

import "strings"

const (
	// BumpSQL raises an existing fence row, cheaper than the upsert (which tries the
	// insert first); it matches no row without one or over a higher token. Arguments:
	// the token, the resource, the token.
	BumpSQL = "UPDATE fence_tokens SET token = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE resource = ? AND token <= ?"

	// RaiseSQL inserts or raises the fence row; updated_at goes before token changes. A
	// refusal leaves the row and hands back the stored token as LAST_INSERT_ID (0 on a
	// raise: fence_tokens has no AUTO_INCREMENT column). Arguments: the resource, the token.
	RaiseSQL = "INSERT INTO fence_tokens (resource, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE " +
		"updated_at = IF(token <= VALUES(token), CURRENT_TIMESTAMP(6), updated_at), " +
		"token = IF(token <= VALUES(token), VALUES(token), LAST_INSERT_ID(token))"

	// ProbeSQL writes the resource's ($1) fence row unchanged, 1 row matched with
	// clientFoundRows (0 without it) the second time.
	ProbeSQL = "INSERT INTO fence_tokens (resource, token) VALUES (?, 1) ON DUPLICATE KEY UPDATE token = token"
)

// RaiseSetSQL raises the n resources of a fence.Set, locking their rows in the order
// given (sorted), never lowering one; a row left as it was counts as matched
// (clientFoundRows), so HigherSQL must tell a refusal. Arguments: each resource with
// the token.
func RaiseSetSQL(n int) string {
	return "INSERT INTO fence_tokens (resource, token) VALUES " + repeat("(?, ?)", n) +
		" ON DUPLICATE KEY UPDATE updated_at = IF(token <= VALUES(token), CURRENT_TIMESTAMP(6), updated_at), " +
		"token = GREATEST(token, VALUES(token))"
}

// HigherSQL returns the first of n resources (sorted) holding a token above the set's:
// resource, token. Arguments: the resources, the token.
func HigherSQL(n int) string {
	return "SELECT resource, token FROM fence_tokens WHERE resource IN (" + repeat("?", n) +
		") AND token > ? ORDER BY resource LIMIT 1"
}

// UpdateSQL is the single-row Update in one statement: the fence row joined to the row
// (STRAIGHT_JOIN: fence row first, as a fenced transaction locks), the table's columns
// qualified (they may share fence_tokens' names). It matches nothing without a fence
// row. table, tok, keys and set are quoted. Arguments: the key values, the set values,
// then the token, the token, the resource, the token, the token.
func UpdateSQL(table, tok string, keys, set []string) string {
	const t = "fencegate_t."
	return "UPDATE fence_tokens AS fencegate_ft STRAIGHT_JOIN " + table + " AS fencegate_t ON " + eqs(t, keys, " AND ") +
		" SET " + eqs(t, set, ", ") + ", " + t + tok + " = ?, fencegate_ft.updated_at = CURRENT_TIMESTAMP(6), fencegate_ft.token = ?" +
		" WHERE fencegate_ft.resource = ? AND fencegate_ft.token <= ? AND " + t + tok + " <= ?"
}

// The operator's statements (fencemark, fencectl), over the stored marks.
const (
	// MarkSQL reads the resource's mark; MarkLockSQL also locks its row to commit.
	MarkSQL     = "SELECT token FROM fence_tokens WHERE resource = ?"
	MarkLockSQL = MarkSQL + " FOR UPDATE"
	// MarkRaiseSQL raises the resource's mark to the token unless as high; never
	// refuses. updated_at is decided on the old token. Arguments: resource, token.
	MarkRaiseSQL = "INSERT INTO fence_tokens (resource, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE " +
		"updated_at = IF(token < VALUES(token), CURRENT_TIMESTAMP(6), updated_at), " +
		"token = IF(token < VALUES(token), VALUES(token), token)"
	// RaiseAllSQL raises every mark below the token to it. Arguments: token, token.
	RaiseAllSQL = "UPDATE fence_tokens SET updated_at = CURRENT_TIMESTAMP(6), token = ? WHERE token < ?"
	// ListSQL lists every mark (resource, token, updated_at) by resource; ListOneSQL one's.
	ListSQL    = "SELECT resource, token, updated_at FROM fence_tokens ORDER BY resource"
	ListOneSQL = "SELECT resource, token, updated_at FROM fence_tokens WHERE resource = ?"
)

// repeat is n copies of s, comma-separated.
func repeat(s string, n int) string {
	return strings.TrimSuffix(strings.Repeat(s+", ", n), ", ")
}

// eqs is "p.c1 = ?<sep>p.c2 = ?".
func eqs(p string, cols []string, sep string) string {
	var b strings.Builder
	b.Grow(len(cols) * (len(p) + len(sep) + 16))
	for i, c := range cols {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(p + c + " = ?")
	}
	return b.String()
}
