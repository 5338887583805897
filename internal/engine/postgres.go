package engine

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
)

// PGStaleMarker starts the text PGRaiseSQL casts to bigint when it refuses.
const PGStaleMarker = "fencegate-stale:"

// PGRaiseSQL raises the fence in one statement of the extended protocol (prepared once
// per connection by pgx's statement cache): it inserts the resource's row or raises
// it to the token, and locks it to commit. When a higher token is stored, the CASE
// casts 'fencegate-stale:<stored>' to bigint, which fails (SQLSTATE 22P02) and aborts
// the transaction, so a statement behind it in the same batch never runs; refusal
// reads the stored token from the message. It needs no function, and is faster than
// fence_raise (PL/pgSQL, migration 3) in the same batch (BENCHMARKS.md). When the row
// already holds the token (another
// transaction of the same grant) it is locked but not rewritten: ON CONFLICT DO
// UPDATE locks the conflicting row even where its WHERE is false.
const PGRaiseSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) VALUES ($1, $2) " + raiseConflict

// raiseConflict is the raise's ON CONFLICT clause, shared by its forms.
const raiseConflict = "ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
	"THEN EXCLUDED.token ELSE ('" + PGStaleMarker + "' || fencegate_ft.token)::bigint END, " +
	"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"

// PGRaiseIdleSQL is PGRaiseSQL that also bounds the transaction's idle time ($3, see
// PGIdleFrom): the form a pipelined Fenced sends, one statement fewer in its batch.
const PGRaiseIdleSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT $1::varchar, $2::bigint FROM " +
	PGIdleFrom + " " + raiseConflict

// PGRaiseSetSQL is PGRaiseSQL for a fence.Set grant: one statement raises every resource's
// row, inserting the missing ones, in byte order of the resource names (the order
// Resources gives), so that transactions over overlapping sets lock their rows
// in one order. A refusal names the resource whose stored token is higher:
// 'fencegate-stale:<stored>/<resource>'. Arguments: the sorted, distinct resources
// (a varchar[]) and the token; fenceFirstSQL writes them as literals. from is
// prepended to the FROM list (PGIdleFrom, or nothing).
func PGRaiseSetSQL(resources, token, from string) string {
	return "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT fencegate_r, " + token +
		"::bigint FROM " + from + "unnest(" + resources + "::varchar[]) AS fencegate_r ORDER BY fencegate_r COLLATE \"C\" " +
		"ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
		"THEN EXCLUDED.token ELSE ('" + PGStaleMarker + "' || fencegate_ft.token || '/' || fencegate_ft.resource)::bigint END, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"
}

// PGRaiseSetParams and PGRaiseSetIdleParams are PGRaiseSetSQL for the extended protocol,
// the second also bounding the idle time ($3).
var (
	PGRaiseSetParams     = PGRaiseSetSQL("$1", "$2", "")
	PGRaiseSetIdleParams = PGRaiseSetSQL("$1", "$2", PGIdleFrom+", ")
)

// PGIdleFrom bounds how long the fenced transaction may sit idle on the server, for this
// transaction only (is_local): a client that stops inside fn (a frozen process)
// holding the fence row is ended by PostgreSQL after that long (FATAL 25P03), its
// locks released and nothing of it committed, so the next holder's write waits about
// one lease, not until the frozen process wakes. It is a FROM item of the raise
// (PGRaiseIdleSQL), whose one row the INSERT reads, so set_config runs in the raise
// itself: no round trip and no statement of its own (BENCHMARKS.md measures what one
// costs). lock_timeout
// and statement_timeout are left alone: a transaction that waits on a lock or runs a
// long statement is working, not frozen.
const PGIdleFrom = "(SELECT set_config('idle_in_transaction_session_timeout', $3, true)) AS fencegate_idle"

// PGMarkedStale reads the stored token from the error PGRaiseSQL makes when it refuses:
// invalid input syntax for type bigint: "fencegate-stale:41", or for a set
// "fencegate-stale:41/res-a" naming the resource. Only the quoted value is taken,
// since the words around it follow the server's lc_messages; the resource runs to the
// last double quote (a resource may hold one itself).
func PGMarkedStale(msg string) (fence.Token, string, bool) {
	_, rest, ok := strings.Cut(msg, PGStaleMarker)
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

// literal quotes a resource name as a PostgreSQL escape-string constant, for the one
// place a value cannot be a parameter (the simple-protocol message that carries BEGIN
// and the fence raise). In E'...' only the backslash and the single quote are special,
// whatever standard_conforming_strings says; both are doubled. A resource has passed
// fence.CheckResource (valid UTF-8, no NUL), and pgx always speaks UTF-8, so no byte
// sequence can end the constant early.
func PGLiteral(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 4)
	b.WriteString("E'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '\'':
			b.WriteByte(c)
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// PGRaise returns the fence raise of g and its arguments: PGRaiseSQL for one resource,
// PGRaiseSetParams for a fence.Set. With idleMS set (a transaction's idle bound in
// milliseconds, see PGIdleFrom) the raise also sets it.
func PGRaise(g fence.Grant, idleMS string) (string, []any) {
	args := []any{g.Resource(), int64(g.Token())}
	if Multi(g) {
		args[0] = Resources(g)
	}
	switch {
	case idleMS == "" && Multi(g):
		return PGRaiseSetParams, args
	case idleMS == "":
		return PGRaiseSQL, args
	case Multi(g):
		return PGRaiseSetIdleParams, append(args, idleMS)
	}
	return PGRaiseIdleSQL, append(args, idleMS)
}

// PGRaiseLiteral is the simple-protocol raise of g, with its values as literals (see
// PGLiteral), for the message that carries BEGIN and the raise: the set form, which
// for one resource is PGRaiseSQL's, so that every refusal PostgreSQL sends is the one
// PGStaleMarker encoding.
func PGRaiseLiteral(g fence.Grant) string {
	res := Resources(g)
	lits := make([]string, len(res))
	for i, r := range res {
		lits[i] = PGLiteral(r)
	}
	return PGRaiseSetSQL("ARRAY["+strings.Join(lits, ", ")+"]", strconv.FormatInt(int64(g.Token()), 10), "")
}

// PostgreSQL's SQLSTATEs the adapters tell apart, through either driver.
const (
	PGBadText         = "22P02" // raised on purpose by the raise: see PGStaleMarker
	PGSerialization   = "40001"
	PGDeadlock        = "40P01"
	PGLockUnavailable = "55P03"
	PGUnique          = "23505"
	PGNoFunction      = "42883"
	PGNoTable         = "42P01"
	PGNoConstraint    = "42P10" // ON CONFLICT names no unique index
	PGIdleTimeout     = "25P03" // idle_in_transaction_session_timeout ended the session
)

// PGRefusal is what a PostgreSQL error (SQLSTATE state, message msg) of a fenced
// transaction's raise or COMMIT means: a *fence.StaleError for the raise's refusal,
// fence.ErrBusy for a serialization failure, fence.ErrSchema without the migrations,
// fence.ErrIdleTimeout for a transaction the server ended for idling; nil otherwise.
func PGRefusal(g fence.Grant, state, msg string, err error) error {
	switch state {
	case PGBadText:
		if seen, res, ok := PGMarkedStale(msg); ok {
			if res == "" {
				res = g.Resource()
			}
			return &fence.StaleError{Resource: res, Presented: g.Token(), Seen: seen}
		}
	case PGSerialization:
		return fmt.Errorf("%w: fence %q at token %d: %w", fence.ErrBusy, g.Resource(), g.Token(), err)
	case PGNoFunction, PGNoTable:
		return fmt.Errorf("%w: %w", fence.ErrSchema, err)
	case PGIdleTimeout:
		return IdleTimeoutErr(g, err)
	}
	return nil
}

// PGUpdateSQL is the single-row Update of both PostgreSQL adapters over quoted names:
// a data-modifying CTE raises the fence row, then the UPDATE writes the row and the
// token. The CTE is an InitPlan of the UPDATE's EXISTS, run before any target row is
// locked, so Update locks in the order Fenced does: fence row, then data. bump raises
// an existing fence row with a plain UPDATE, which costs the server less than the
// upsert (no speculative insertion) but writes nothing when the resource has no fence
// row yet. Either way the raise's WHERE (token <= ours) is re-checked on the newest
// version of a fence row it waited for. Arguments: the resource, the token, the set
// values, the key values.
func PGUpdateSQL(table, tok string, keys, set []string, bump bool) string {
	n := 2
	next := func() string { n++; return "$" + strconv.Itoa(n) }
	vals := make([]string, len(set))
	for i := range set {
		vals[i] = next()
	}
	var match strings.Builder
	for i, k := range keys {
		if i > 0 {
			match.WriteString(" AND ")
		}
		match.WriteString(k + " = " + next())
	}
	match.WriteString(" AND " + tok + " <= $2")
	exists := "EXISTS (SELECT 1 FROM " + table + " WHERE " + match.String() + ")"
	var b strings.Builder
	b.Grow(320 + len(table) + 16*(len(set)+len(keys)))
	if bump {
		b.WriteString("WITH fencegate_raised AS (UPDATE fence_tokens AS fencegate_ft SET token = $2::bigint, " +
			"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.resource = $1::varchar AND fencegate_ft.token <= $2::bigint AND " +
			exists + " RETURNING 1) ")
	} else {
		b.WriteString(PGFenceCTE("$1", "$2", exists))
	}
	b.WriteString("UPDATE " + table + " SET ")
	for i := range set {
		b.WriteString(set[i] + " = " + vals[i] + ", ")
	}
	b.WriteString(tok + " = $2 WHERE " + match.String() + " AND EXISTS (SELECT 1 FROM fencegate_raised)")
	return b.String()
}

// PGFenceCTE is the CTE that raises the fence row of resource res to token tok
// (placeholders), inserting it if missing, when cond holds: a single-row write's
// statement runs behind it only if it returned a row.
func PGFenceCTE(res, tok, cond string) string {
	return "WITH fencegate_raised AS (INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT " +
		res + "::varchar, " + tok + "::bigint WHERE " + cond + " ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <= EXCLUDED.token RETURNING 1) "
}
