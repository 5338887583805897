package pgxfence

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/grant"
)

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
