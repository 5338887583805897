// Package sqlitesql is SQLite's side of a fenced write, written once for sqlfence,
// fencemark and fencectl: every statement on fence_tokens (the raise, the set raise,
// the mark's reads, the operator's raise and list), with its arguments in order. A
// fenced raise is BumpSQL, then RaiseSQL when the bump matched no row; a transaction
// begun IMMEDIATE (sqlfence/sqlite's pools) holds the database's write lock, so every
// read in it is locked too.
package sqlitesql

import "strings"

const (
	// BumpSQL raises an existing fence row, cheaper than the upsert; it matches no row
	// without one or over a higher token. Arguments: the token, the resource, the token.
	BumpSQL = "UPDATE fence_tokens SET token = ?, updated_at = CURRENT_TIMESTAMP WHERE resource = ? AND token <= ?"

	// RaiseSQL inserts or raises the fence row; it changes no row (RowsAffected 0) when
	// a higher token is stored. Arguments: the resource, the token.
	RaiseSQL = "INSERT INTO fence_tokens (resource, token) VALUES (?, ?)" + raised
)

// raised ends a fence-row INSERT: raised unless a higher token is stored.
const raised = " ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = CURRENT_TIMESTAMP " +
	"WHERE fence_tokens.token <= excluded.token"

// RaiseSetSQL raises the n resources of a fence.Set, never lowering one: all were
// raised when it changed n rows, else HigherSQL names a refusing one. Arguments: each
// resource with the token.
func RaiseSetSQL(n int) string {
	return "INSERT INTO fence_tokens (resource, token) VALUES " + repeat("(?, ?)", n) + raised
}

// HigherSQL returns the first of n resources (sorted) holding a token above the set's:
// resource, token. Arguments: the resources, the token.
func HigherSQL(n int) string {
	return "SELECT resource, token FROM fence_tokens WHERE resource IN (" + repeat("?", n) +
		") AND token > ? ORDER BY resource LIMIT 1"
}

// The operator's statements (fencemark, fencectl), over the stored marks.
const (
	// MarkSQL reads the resource's mark; in an IMMEDIATE transaction it is locked too.
	MarkSQL = "SELECT token FROM fence_tokens WHERE resource = ?"
	// MarkRaiseSQL raises the resource's mark to the token unless as high; never
	// refuses. Arguments: resource, token.
	MarkRaiseSQL = "INSERT INTO fence_tokens (resource, token) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE " +
		"SET token = excluded.token, updated_at = CURRENT_TIMESTAMP WHERE fence_tokens.token < excluded.token"
	// RaiseAllSQL raises every mark below the token to it. Arguments: token, token.
	RaiseAllSQL = "UPDATE fence_tokens SET token = ?, updated_at = CURRENT_TIMESTAMP WHERE token < ?"
	// ListSQL lists every mark (resource, token, updated_at) by resource; ListOneSQL one's.
	ListSQL    = "SELECT resource, token, updated_at FROM fence_tokens ORDER BY resource"
	ListOneSQL = "SELECT resource, token, updated_at FROM fence_tokens WHERE resource = ?"
)

// repeat is n copies of s, comma-separated.
func repeat(s string, n int) string {
	return strings.TrimSuffix(strings.Repeat(s+", ", n), ", ")
}
