package pgxfence

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/grant"
)

// staleMarker starts the text raiseSQL casts to bigint when it refuses.
const staleMarker = "fencegate-stale:"

// raiseSQL raises the fence in one statement of the extended protocol (prepared once
// per connection by pgx's statement cache): it inserts the resource's row or raises
// it to the token, and locks it to commit. When a higher token is stored, the CASE
// casts 'fencegate-stale:<stored>' to bigint, which fails (SQLSTATE 22P02) and aborts
// the transaction, so a statement behind it in the same batch never runs; refusal
// reads the stored token from the message. It needs no function, and is faster than
// fence_raise (PL/pgSQL, migration 3) in the same batch (BENCHMARKS.md). When the row
// already holds the token (another
// transaction of the same grant) it is locked but not rewritten: ON CONFLICT DO
// UPDATE locks the conflicting row even where its WHERE is false.
const raiseSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) VALUES ($1, $2) " + raiseConflict

// raiseConflict is the raise's ON CONFLICT clause, shared by its forms.
const raiseConflict = "ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
	"THEN EXCLUDED.token ELSE ('" + staleMarker + "' || fencegate_ft.token)::bigint END, " +
	"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"

// raiseIdleSQL is raiseSQL that also bounds the transaction's idle time ($3, see
// idleFrom): the form a pipelined Fenced sends, one statement fewer in its batch.
const raiseIdleSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT $1::varchar, $2::bigint FROM " +
	idleFrom + " " + raiseConflict

// raiseSetSQL is raiseSQL for a fence.Set grant: one statement raises every resource's
// row, inserting the missing ones, in byte order of the resource names (the order
// grant.Resources gives), so that transactions over overlapping sets lock their rows
// in one order. A refusal names the resource whose stored token is higher:
// 'fencegate-stale:<stored>/<resource>'. Arguments: the sorted, distinct resources
// (a varchar[]) and the token; fenceFirstSQL writes them as literals. from is
// prepended to the FROM list (idleFrom, or nothing).
func raiseSetSQL(resources, token, from string) string {
	return "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT fencegate_r, " + token +
		"::bigint FROM " + from + "unnest(" + resources + "::varchar[]) AS fencegate_r ORDER BY fencegate_r COLLATE \"C\" " +
		"ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
		"THEN EXCLUDED.token ELSE ('" + staleMarker + "' || fencegate_ft.token || '/' || fencegate_ft.resource)::bigint END, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"
}

// raiseSetParams and raiseSetIdleParams are raiseSetSQL for the extended protocol,
// the second also bounding the idle time ($3).
var (
	raiseSetParams     = raiseSetSQL("$1", "$2", "")
	raiseSetIdleParams = raiseSetSQL("$1", "$2", idleFrom+", ")
)

// raiseFor returns the fence raise of g and its arguments: raiseSQL for one resource,
// raiseSetParams for a fence.Set. With idleMS set (a transaction's idle bound in
// milliseconds, see idleFrom) the raise also sets it.
func raiseFor(g fence.Grant, idleMS string) (string, []any) {
	args := []any{g.Resource(), int64(g.Token())}
	if grant.Multi(g) {
		args[0] = grant.Resources(g)
	}
	switch {
	case idleMS == "" && grant.Multi(g):
		return raiseSetParams, args
	case idleMS == "":
		return raiseSQL, args
	case grant.Multi(g):
		return raiseSetIdleParams, append(args, idleMS)
	}
	return raiseIdleSQL, append(args, idleMS)
}

// fenceFirstSQL is the simple-protocol raise of g, with its values as literals (see
// literal), for the message that carries BEGIN and the raise: the set form, which
// for one resource is raiseSQL's, so that every refusal PostgreSQL sends is the one
// staleMarker encoding.
func fenceFirstSQL(g fence.Grant) string {
	res := grant.Resources(g)
	lits := make([]string, len(res))
	for i, r := range res {
		lits[i] = literal(r)
	}
	return raiseSetSQL("ARRAY["+strings.Join(lits, ", ")+"]", strconv.FormatInt(int64(g.Token()), 10), "")
}

// idleFrom bounds how long the fenced transaction may sit idle on the server, for this
// transaction only (is_local): a client that stops inside fn (a frozen process)
// holding the fence row is ended by PostgreSQL after that long (FATAL 25P03), its
// locks released and nothing of it committed, so the next holder's write waits about
// one lease, not until the frozen process wakes. It is a FROM item of the raise
// (raiseIdleSQL), whose one row the INSERT reads, so set_config runs in the raise
// itself: no round trip and no statement of its own (BENCHMARKS.md measures what one
// costs). lock_timeout
// and statement_timeout are left alone: a transaction that waits on a lock or runs a
// long statement is working, not frozen.
const idleFrom = "(SELECT set_config('idle_in_transaction_session_timeout', $3, true)) AS fencegate_idle"

// WithIdleTimeout sets how long a fenced transaction begun on a pool or connection
// may sit idle on the server (between statements, or before COMMIT) before the server
// ends it: idle_in_transaction_session_timeout, set for that transaction only. The
// default is the grant's lease when it implements fence.Leased, else
// 10 s (the lock service's default lease). A d under a millisecond is
// refused (fence.ErrInvalidArgument). Fenced transactions that are savepoints of a caller's pgx.Tx
// set nothing: the caller's transaction is the caller's to bound.
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d < time.Millisecond {
			return optionErr(fmt.Sprintf("WithIdleTimeout(%v)", d), "want at least 1ms")
		}
		s.idle = d
		return nil
	}
}

// idleMS is the idle timeout of g's transactions in milliseconds, as text.
func (s *Store) idleMS(g fence.Grant) string {
	return strconv.FormatInt(grant.IdleTimeout(g, s.idle).Milliseconds(), 10)
}
