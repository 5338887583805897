// Package pgsql is PostgreSQL's side of a fenced write, written once for pgx and
// database/sql: every statement the adapters send (the fence row's raise, its idle
// bound, the single-row Update's CTE), its argument order, and the classification of
// PostgreSQL's errors (SQLSTATEs, severities) into fence's errors.
package pgsql

import (
	"fmt"
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
const IdleFrom = idleHead + "$3" + idleTail

const (
	idleHead = "(SELECT set_config('idle_in_transaction_session_timeout', "
	idleTail = ", true)) AS fencegate_idle"
)

// RaiseSetEach is RaiseSetSQL with a parameter per resource ($1..$n), for drivers
// that cannot send a varchar[]; the token is $n+1, the idle bound $n+2.
func RaiseSetEach(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(i+1)
	}
	return RaiseSetSQL("ARRAY["+strings.Join(ps, ", ")+"]", "$"+strconv.Itoa(n+1),
		idleHead+"$"+strconv.Itoa(n+2)+idleTail+", ")
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

// PostgreSQL's SQLSTATEs the adapters tell apart, through either driver.
const (
	BadText         = "22P02" // raised on purpose by the raise: see StaleMarker
	Serialization   = "40001"
	Deadlock        = "40P01"
	LockUnavailable = "55P03"
	Unique          = "23505"
	NoFunction      = "42883"
	NoTable         = "42P01"
	NoColumn        = "42703"
	NoConstraint    = "42P10" // ON CONFLICT names no unique index
	IdleTimeout     = "25P03" // idle_in_transaction_session_timeout ended the session
)

// Refusal maps a raise's or COMMIT's error to a *fence.StaleError, fence.ErrBusy
// (40001), fence.ErrSchema or fence.ErrIdleTimeout; nil for any other.
func Refusal(g fence.Grant, state, msg string, err error) error {
	switch state {
	case BadText:
		if seen, res, ok := MarkedStale(msg); ok {
			if res == "" {
				res = g.Resource()
			}
			return &fence.StaleError{Resource: res, Presented: g.Token(), Seen: seen}
		}
	case Serialization:
		return fmt.Errorf("%w: fence %q at token %d: %w", fence.ErrBusy, g.Resource(), g.Token(), err)
	case NoFunction, NoTable:
		return fmt.Errorf("%w: %w", fence.ErrSchema, err)
	case IdleTimeout:
		return grant.IdleTimeoutErr(g, err)
	}
	return nil
}

// UpdateSQL is the single-row Update over quoted names: a CTE (an InitPlan, run
// before any target row is locked, as Fenced locks) raises the fence row, then the
// UPDATE writes. bump raises an existing fence row by a plain UPDATE (a no-op without
// one). Arguments: the resource, the token, the set values, the key values.
func UpdateSQL(table, tok string, keys, set []string, bump bool) string {
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
		b.WriteString(FenceCTE("$1", "$2", exists))
	}
	b.WriteString("UPDATE " + table + " SET ")
	for i := range set {
		b.WriteString(set[i] + " = " + vals[i] + ", ")
	}
	b.WriteString(tok + " = $2 WHERE " + match.String() + " AND EXISTS (SELECT 1 FROM fencegate_raised)")
	return b.String()
}

// FenceCTE raises (or inserts) the fence row of res to tok when cond holds; the
// write behind it runs only if it returned a row.
func FenceCTE(res, tok, cond string) string {
	return "WITH fencegate_raised AS (INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT " +
		res + "::varchar, " + tok + "::bigint WHERE " + cond + " ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <= EXCLUDED.token RETURNING 1) "
}

// ReplyLost reports whether an error reply to COMMIT, or to a write outside a
// transaction, leaves the outcome unknown: FATAL or PANIC may follow a recorded
// commit; ERROR and 25P03 (ended idle before COMMIT) decide. With no severity (""),
// classes 08 and 57P, which end a session, say it.
func ReplyLost(state, severity string) bool {
	switch {
	case state == IdleTimeout:
		return false
	case severity != "":
		return severity == "FATAL" || severity == "PANIC"
	}
	return strings.HasPrefix(state, "08") || strings.HasPrefix(state, "57P")
}
