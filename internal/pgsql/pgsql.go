// Package pgsql is PostgreSQL's side of a fenced write, written once for pgx,
// database/sql, fencemark and fencectl: every statement on fence_tokens (this file: the
// raise, its idle bound, the set raise, the single-row writes' raise, the mark's reads,
// the operator's raise and list), the single-row statements around them (rows.go), the
// raise with its values as literals (literal.go), and the classification of
// PostgreSQL's errors (errors.go).
package pgsql

import (
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// StaleMarker starts the text RaiseSQL casts to bigint when it refuses.
const StaleMarker = "fencegate-stale:"

// RaiseSQL inserts or raises the resource's fence row, locked to commit. Over a
// higher token the CASE casts 'fencegate-stale:<stored>' to bigint, failing (22P02)
// and aborting the transaction, so a statement batched behind never runs. A row at the
// token is locked (DO UPDATE locks even where its WHERE is false), not rewritten.
// Arguments: the resource, the token.
const RaiseSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) VALUES ($1, $2) " + raiseConflict

const raiseConflict = "ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
	"THEN EXCLUDED.token ELSE ('" + StaleMarker + "' || fencegate_ft.token)::bigint END, " +
	"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"

// RaiseIdleSQL is RaiseSQL that also bounds the idle time ($3, see IdleFrom).
const RaiseIdleSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT $1::varchar, $2::bigint FROM " +
	IdleFrom + " " + raiseConflict

// RaiseSetSQL is RaiseSQL for a fence.Set, rows raised in Resources' order; a
// refusal reads 'fencegate-stale:<stored>/<resource>'. resources (varchar[]) and token
// are placeholders or literals; from is prepended to the FROM list (IdleFrom, or "").
func RaiseSetSQL(resources, token, from string) string {
	return "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT fencegate_r, " + token +
		"::bigint FROM " + from + "unnest(" + resources + "::varchar[]) AS fencegate_r ORDER BY fencegate_r COLLATE \"C\" " +
		"ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
		"THEN EXCLUDED.token ELSE ('" + StaleMarker + "' || fencegate_ft.token || '/' || fencegate_ft.resource)::bigint END, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"
}

// RaiseSetSQL over $1 and $2, the second form also bounding the idle time ($3).
var (
	RaiseSetParams     = RaiseSetSQL("$1", "$2", "")
	RaiseSetIdleParams = RaiseSetSQL("$1", "$2", IdleFrom+", ")
)

// IdleFrom sets idle_in_transaction_session_timeout for the transaction, as a FROM
// item of the raise: PostgreSQL ends a frozen holder (FATAL 25P03), nothing committed.
// lock_timeout and statement_timeout are left alone: waiting or running is not frozen.
const IdleFrom = "(SELECT set_config('idle_in_transaction_session_timeout', $3, true)) AS fencegate_idle"

// Raise returns c's raise and arguments; idleMS, if set, bounds the idle time.
func Raise(c *grant.Checked, idleMS string) (string, []any) {
	args := []any{c.Resource(), int64(c.Token())}
	if c.Multi() {
		args[0] = c.Resources()
	}
	switch {
	case idleMS == "" && c.Multi():
		return RaiseSetParams, args
	case idleMS == "":
		return RaiseSQL, args
	case c.Multi():
		return RaiseSetIdleParams, append(args, idleMS)
	}
	return RaiseIdleSQL, append(args, idleMS)
}

// MarkedStale reads the stored token (and a set's resource) from a raise's refusal,
// "...: \"fencegate-stale:41/res-a\"": only the quoted value, as the words follow
// lc_messages; the resource runs to the last double quote.
func MarkedStale(msg string) (fence.Token, string, bool) {
	_, rest, ok := strings.Cut(msg, StaleMarker)
	if !ok {
		return 0, "", false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	seen, err := strconv.ParseInt(rest[:end], 10, 64)
	if err != nil {
		return 0, "", false
	}
	res := ""
	if tail, ok := strings.CutPrefix(rest[end:], "/"); ok {
		if q := strings.LastIndexByte(tail, '"'); q >= 0 {
			res = tail[:q]
		}
	}
	return fence.Token(seen), res, true
}

// FenceCTE raises (or inserts) the fence row of res to tok when cond holds; the
// write behind it runs only if it returned a row.
func FenceCTE(res, tok, cond string) string {
	return "WITH fencegate_raised AS (INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT " +
		res + "::varchar, " + tok + "::bigint WHERE " + cond + " ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <= EXCLUDED.token RETURNING 1) "
}

// BumpCTE is FenceCTE raising an existing fence row by a plain UPDATE, cheaper than
// the upsert; without a fence row it returns none.
func BumpCTE(res, tok, cond string) string {
	return "WITH fencegate_raised AS (UPDATE fence_tokens AS fencegate_ft SET token = " + tok + "::bigint, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.resource = " + res + "::varchar AND fencegate_ft.token <= " +
		tok + "::bigint AND " + cond + " RETURNING 1) "
}

// Mark reads a resource's stored token, the resource given as param ("$1").
func Mark(param string) string { return markHead + param }

const markHead = "SELECT token FROM fence_tokens WHERE resource = "

// The operator's statements (fencemark, fencectl), over the stored marks.
const (
	// MarkSQL reads the resource's ($1) mark; MarkLockSQL also locks its row to commit.
	MarkSQL     = markHead + "$1"
	MarkLockSQL = MarkSQL + " FOR UPDATE"
	// MarkRaiseSQL raises the resource's ($1) mark to $2 unless as high; never refuses.
	MarkRaiseSQL = "INSERT INTO fence_tokens AS f (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE " +
		"SET token = EXCLUDED.token, updated_at = CURRENT_TIMESTAMP WHERE f.token < EXCLUDED.token"
	// RaiseAllSQL raises every mark below $1 to $1.
	RaiseAllSQL = "UPDATE fence_tokens SET token = $1, updated_at = CURRENT_TIMESTAMP WHERE token < $1"
	// ListSQL lists every mark (resource, token, updated_at) by resource; ListOneSQL $1's.
	ListSQL    = "SELECT resource, token, updated_at FROM fence_tokens ORDER BY resource"
	ListOneSQL = "SELECT resource, token, updated_at FROM fence_tokens WHERE resource = $1"
)
