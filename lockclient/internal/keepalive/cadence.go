package keepalive

import (
	"math/rand/v2"
	"time"
)

// slowAnswer is the share of the TTL (one part in slowAnswer) that a keepalive's
// answer may take before the session counts etcd as slow: an idle session then
// renews as often as a busy one, because a late idle renewal leaves less time
// for slow answers than a busy one does.
const slowAnswer = 10

// Cadence is what a session's loop knows of its renewals: when the latest
// keepalive went out, whether etcd confirmed it, and how long etcd took. From it
// and whether the Client holds a lock, next tells when the next keepalive is due.
//
// The cadence is by need. A session that holds a lock renews every interval
// (TTL/3 by default), so that a renewal or two may fail before its deadline
// passes. A session that holds none renews every idle interval (TTL/2 by
// default), and when a keepalive goes unanswered it tries again half the gap
// between that interval and the TTL later (a quarter TTL), so an idle session
// too survives a failed renewal; losing it would lose no lock, but every expiry costs etcd a
// synchronous commit. A session that becomes busy renews at once if its latest
// keepalive went out more than an interval ago, so a lock taken on a session
// renewed long ago starts with the tolerance of a busy one.
type Cadence struct {
	ttl      time.Duration
	interval time.Duration // while a lock is held
	idle     time.Duration // while none is
	last     time.Time     // send time of the latest keepalive; the grant's at first
	answered bool          // etcd confirmed the latest keepalive
	slow     bool          // the latest answer took longer than TTL/slowAnswer
	early    float64       // in [0, 1): the next renewal comes early by this share of a tenth of its interval
	retryAt  time.Time     // not zero: a send failed or the stream broke, try again then
}

// retryDelay spaces a new send after one that failed.
const retryDelay = 100 * time.Millisecond

// NewCadence returns the cadence of a session with the given TTL and renewal
// intervals whose lease was granted by a request sent at granted.
func NewCadence(ttl, interval, idle time.Duration, granted time.Time) *Cadence {
	return &Cadence{ttl: ttl, interval: interval, idle: idle, last: granted, answered: true, early: rand.Float64()}
}

// Restore sets what the cadence knows, without jitter: the latest keepalive
// went out at last, and etcd answered it (slowly) or not.
func (r *Cadence) Restore(last time.Time, answered, slow bool) {
	r.last, r.answered, r.slow, r.early, r.retryAt = last, answered, slow, 0, time.Time{}
}

// Next returns when the next keepalive is due; busy is whether the client
// holds a lock.
func (r *Cadence) Next(busy bool) time.Time {
	if !r.retryAt.IsZero() {
		return r.retryAt
	}
	busy = busy || r.slow
	if !r.answered {
		// The latest keepalive is unanswered: one more on the same stream (etcd
		// answers a stream's keepalives in order, so a late answer still counts).
		if busy {
			return r.last.Add(r.interval)
		}
		return r.last.Add(min(r.interval, (r.ttl-r.idle)/2))
	}
	every := r.idle
	if busy {
		every = r.interval
	}
	// Up to a tenth early, at random: Clients whose sessions started together
	// (after an outage, say) drift apart instead of renewing in bursts forever.
	// Earlier is always safe.
	return r.last.Add(every - time.Duration(r.early*float64(every/10)))
}

// Sent records a keepalive sent at now.
func (r *Cadence) Sent(now time.Time) {
	r.last, r.answered, r.retryAt = now, false, time.Time{}
}

// Failed schedules a retry soon: no keepalive could be sent, or the stream
// broke.
func (r *Cadence) Failed(now time.Time) {
	r.retryAt = now.Add(min(retryDelay, r.interval))
}

// Confirmed records an answer that took rtt; latest is whether it answered the
// latest keepalive (none is still waiting for its answer).
func (r *Cadence) Confirmed(rtt time.Duration, latest bool) {
	r.answered = latest
	r.slow = rtt > r.ttl/slowAnswer
	r.early = rand.Float64()
}
