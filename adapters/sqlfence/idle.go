package sqlfence

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// WithIdleTimeout sets how long a fenced transaction may sit idle on the server
// (between statements, or before COMMIT) before the server ends it, so that a holder
// frozen inside fn (a stopped process) holding the fence row cannot hold up its
// successor much longer than its lease. The default is the grant's lease when it
// implements fence.Leased, else 10 s (the lock service's default lease).
// A d under a millisecond is refused (fence.ErrInvalidArgument). Per database:
//
//   - PostgreSQL: idle_in_transaction_session_timeout, set for the transaction only
//     (set_config(..., true)) inside the fence raise statement: no round trip of its
//     own. The server ends the session (SQLSTATE 25P03).
//   - MariaDB: idle_transaction_timeout (whole seconds, rounded up) on the session,
//     restored to the server's default when the transaction ends, so a connection
//     returns to the pool with the server's default and the caller's own
//     transactions never inherit it. Through a pool opened by sqlfence/mysql this costs
//     no round trip: the SET, BEGIN and fence raise are one compound statement, and
//     COMMIT (or ROLLBACK) and the restore another. Through a pool opened otherwise
//     the transaction runs on a pinned connection whose timeout is set before BEGIN
//     and restored after: two round trips more. MySQL, which lacks
//     idle_transaction_timeout, gets wait_timeout the second way.
//   - SQLite: nothing to set. Writers are one host's processes and the lock is the
//     database file's: a frozen writer holds it until it wakes or dies, and a
//     waiter's call ends with its ctx's error, wrapped in fence.ErrBusy where the Store
//     was retrying (the driver's busy timeout, 5 s with sqlfence/sqlite, bounds each
//     wait; the Store retries until ctx ends).
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d < time.Millisecond {
			return optionErr(fmt.Sprintf("WithIdleTimeout(%v)", d), "want at least 1ms")
		}
		s.idle = d
		return nil
	}
}

// idleMS is the idle timeout of g's transactions in milliseconds, as text
// (PostgreSQL).
func (s *Store) idleMS(g fence.Grant) string {
	return strconv.FormatInt(engine.IdleTimeout(g, s.idle).Milliseconds(), 10)
}
