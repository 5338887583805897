package fence

import "time"

// Leased is implemented by grants that know how long their lease lasts: how long a
// holder that stopped (a frozen process, a dead one) keeps the lock before it passes
// on. Adapters bound how long a fenced transaction may sit idle on the server by it,
// so that a holder frozen inside its transaction cannot hold up its successor's
// writes much longer than it holds the lock. *lockclient.Lock does not implement it
// yet; without it (and without a Store option) the adapters use DefaultIdleTimeout.
type Leased interface {
	Lease() time.Duration
}

// DefaultIdleTimeout is how long a fenced transaction may sit idle on the server
// (no statement running) before the server ends it, when neither the Store's option
// nor the grant (Leased) says: the lock service's default lease.
const DefaultIdleTimeout = 10 * time.Second

// IdleTimeout returns how long a fenced transaction of g may sit idle: override when
// it is > 0 (a Store option), else g's Lease when g is Leased and it is > 0, else
// DefaultIdleTimeout. It is never under a millisecond, the servers' unit.
func IdleTimeout(g Grant, override time.Duration) time.Duration {
	d := override
	if d <= 0 {
		if l, ok := g.(Leased); ok && !IsNil(g) {
			d = l.Lease()
		}
	}
	if d <= 0 {
		d = DefaultIdleTimeout
	}
	return max(d, time.Millisecond)
}
