package pgxfence

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/grant"
	"github.com/fencegate/fencegate/internal/core/pgsql"
)

// raiseFor returns the fence raise of g and its arguments: pgsql.RaiseSQL for one resource,
// pgsql.RaiseSetParams for a fence.Set. With idleMS set (a transaction's idle bound in
// milliseconds, see pgsql.IdleFrom) the raise also sets it.
func raiseFor(g fence.Grant, idleMS string) (string, []any) {
	args := []any{g.Resource(), int64(g.Token())}
	if grant.Multi(g) {
		args[0] = grant.Resources(g)
	}
	switch {
	case idleMS == "" && grant.Multi(g):
		return pgsql.RaiseSetParams, args
	case idleMS == "":
		return pgsql.RaiseSQL, args
	case grant.Multi(g):
		return pgsql.RaiseSetIdleParams, append(args, idleMS)
	}
	return pgsql.RaiseIdleSQL, append(args, idleMS)
}

// fenceFirstSQL is the simple-protocol raise of g, with its values as literals (see
// literal), for the message that carries BEGIN and the raise: the set form, which
// for one resource is pgsql.RaiseSQL's, so that every refusal PostgreSQL sends is the one
// pgsql.StaleMarker encoding.
func fenceFirstSQL(g fence.Grant) string {
	res := grant.Resources(g)
	lits := make([]string, len(res))
	for i, r := range res {
		lits[i] = pgsql.Literal(r)
	}
	return pgsql.RaiseSetSQL("ARRAY["+strings.Join(lits, ", ")+"]", strconv.FormatInt(int64(g.Token()), 10), "")
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
