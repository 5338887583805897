package fence

import "time"

// Leased is implemented by grants that know how long their lease lasts: how long a
// holder that stopped (a frozen process, a dead one) keeps the lock before it passes
// on. Adapters bound how long a fenced transaction may sit idle on the server by it,
// so that a holder frozen inside its transaction cannot hold up its successor's
// writes much longer than it holds the lock. Without it (and without a Store option)
// the adapters use 10 seconds, the lock service's default lease.
type Leased interface {
	Lease() time.Duration
}
