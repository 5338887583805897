package pgxfence

import (
	"strconv"
	"strings"

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
// reads the stored token from the message. It needs no function: next to fence_raise
// (PL/pgSQL, migration 3) in the same pipelined batch it measured 1.05-1.10 x at 1 and
// 16 workers (BENCHMARKS.md). When the row already holds the token (another
// transaction of the same grant) it is locked but not rewritten: ON CONFLICT DO
// UPDATE locks the conflicting row even where its WHERE is false.
const raiseSQL = "INSERT INTO fence_tokens AS fencegate_ft (resource, token) VALUES ($1, $2) " +
	"ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
	"THEN EXCLUDED.token ELSE ('" + staleMarker + "' || fencegate_ft.token)::bigint END, " +
	"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"

// raiseSetSQL is raiseSQL for a fence.Set grant: one statement raises every resource's
// row, inserting the missing ones, in byte order of the resource names (the order
// grant.Resources gives), so that transactions over overlapping sets lock their rows
// in one order. A refusal names the resource whose stored token is higher:
// 'fencegate-stale:<stored>/<resource>'. Arguments: the sorted, distinct resources
// (a varchar[]) and the token; fenceFirstSQL writes them as literals.
func raiseSetSQL(resources, token string) string {
	return "INSERT INTO fence_tokens AS fencegate_ft (resource, token) SELECT fencegate_r, " + token +
		"::bigint FROM unnest(" + resources + "::varchar[]) AS fencegate_r ORDER BY fencegate_r COLLATE \"C\" " +
		"ON CONFLICT (resource) DO UPDATE SET token = CASE WHEN fencegate_ft.token <= EXCLUDED.token " +
		"THEN EXCLUDED.token ELSE ('" + staleMarker + "' || fencegate_ft.token || '/' || fencegate_ft.resource)::bigint END, " +
		"updated_at = CURRENT_TIMESTAMP WHERE fencegate_ft.token <> EXCLUDED.token"
}

// raiseSetParams is raiseSetSQL for the extended protocol.
var raiseSetParams = raiseSetSQL("$1", "$2")

// raiseFor returns the fence raise of g and its arguments: raiseSQL for one resource,
// raiseSetParams for a fence.Set.
func raiseFor(g fence.Grant) (string, []any) {
	if grant.Multi(g) {
		return raiseSetParams, []any{grant.Resources(g), int64(g.Token())}
	}
	return raiseSQL, []any{g.Resource(), int64(g.Token())}
}

// fenceFirstSQL is the simple-protocol raise of g, with its values as literals (see
// literal), for the message that carries BEGIN and the raise.
func fenceFirstSQL(g fence.Grant) string {
	if !grant.Multi(g) {
		return "SELECT fence_raise(" + literal(g.Resource()) + ", " + strconv.FormatInt(int64(g.Token()), 10) + ")"
	}
	res := grant.Resources(g)
	lits := make([]string, len(res))
	for i, r := range res {
		lits[i] = literal(r)
	}
	return raiseSetSQL("ARRAY["+strings.Join(lits, ", ")+"]", strconv.FormatInt(int64(g.Token()), 10))
}
