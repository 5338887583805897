package pgxfence

import (
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// raiseFor returns the fence raise of g and its arguments: engine.PGRaiseSQL for one resource,
// engine.PGRaiseSetParams for a fence.Set. With idleMS set (a transaction's idle bound in
// milliseconds, see engine.PGIdleFrom) the raise also sets it.
func raiseFor(g fence.Grant, idleMS string) (string, []any) {
	args := []any{g.Resource(), int64(g.Token())}
	if engine.Multi(g) {
		args[0] = engine.Resources(g)
	}
	switch {
	case idleMS == "" && engine.Multi(g):
		return engine.PGRaiseSetParams, args
	case idleMS == "":
		return engine.PGRaiseSQL, args
	case engine.Multi(g):
		return engine.PGRaiseSetIdleParams, append(args, idleMS)
	}
	return engine.PGRaiseIdleSQL, append(args, idleMS)
}

// fenceFirstSQL is the simple-protocol raise of g, with its values as literals (see
// literal), for the message that carries BEGIN and the raise: the set form, which
// for one resource is engine.PGRaiseSQL's, so that every refusal PostgreSQL sends is the one
// engine.PGStaleMarker encoding.
func fenceFirstSQL(g fence.Grant) string {
	res := engine.Resources(g)
	lits := make([]string, len(res))
	for i, r := range res {
		lits[i] = engine.PGLiteral(r)
	}
	return engine.PGRaiseSetSQL("ARRAY["+strings.Join(lits, ", ")+"]", strconv.FormatInt(int64(g.Token()), 10), "")
}

// WithIdleTimeout sets how long a fenced transaction begun on a pool or connection
// may sit idle on the server (between statements, or before COMMIT) before the server
// ends it: idle_in_transaction_session_timeout, set for that transaction only. The
// default is the grant's lease when it implements fence.Leased, else
// 10 s (the lock service's default lease). A d under a millisecond is
// refused (fence.ErrInvalidArgument). Fenced transactions that are savepoints of a caller's pgx.Tx
// set nothing: the caller's transaction is the caller's to bound.
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetIdleTimeout("pgxfence", d)
	}
}
