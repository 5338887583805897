package lockclient

import (
	"math/rand/v2"
	"time"
)

// slowAnswer is the share of the TTL (one part in slowAnswer) that a keepalive's
// answer may take before the session counts etcd as slow: an idle session then
// renews as often as a busy one, because a late idle renewal leaves less time
// for slow answers than a busy one does.
const slowAnswer = 10

// renewal is what a session's loop knows of its renewals: when the latest
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
type renewal struct {
	last     time.Time // send time of the latest keepalive; the grant's at first
	answered bool      // etcd confirmed the latest keepalive
	slow     bool      // the latest answer took longer than TTL/slowAnswer
	early    float64   // in [0, 1): the next renewal comes early by this share of a tenth of its interval
	retryAt  time.Time // not zero: a send failed or the stream broke, try again then
}

func newRenewal(granted time.Time) renewal {
	return renewal{last: granted, answered: true, early: rand.Float64()}
}

// next returns when the next keepalive is due; busy is whether the Client holds
// a lock.
func (r *renewal) next(c *Client, busy bool) time.Time {
	if !r.retryAt.IsZero() {
		return r.retryAt
	}
	busy = busy || r.slow
	if !r.answered {
		// The latest keepalive is unanswered: one more on the same stream (etcd
		// answers a stream's keepalives in order, so a late answer still counts).
		if busy {
			return r.last.Add(c.interval)
		}
		return r.last.Add(min(c.interval, (c.ttl-c.idle)/2))
	}
	every := c.idle
	if busy {
		every = c.interval
	}
	// Up to a tenth early, at random: Clients whose sessions started together
	// (after an outage, say) drift apart instead of renewing in bursts forever.
	// Earlier is always safe.
	return r.last.Add(every - time.Duration(r.early*float64(every/10)))
}

// sent records a keepalive sent at now.
func (r *renewal) sent(now time.Time) {
	r.last, r.answered, r.retryAt = now, false, time.Time{}
}

// failed schedules a retry soon: no keepalive could be sent, or the stream
// broke.
func (r *renewal) failed(now time.Time, c *Client) {
	r.retryAt = now.Add(min(retryDelay, c.interval))
}

// confirmed records an answer that took rtt; latest is whether it answered the
// latest keepalive (none is still waiting for its answer).
func (r *renewal) confirmed(rtt time.Duration, latest bool, c *Client) {
	r.answered = latest
	r.slow = rtt > c.ttl/slowAnswer
	r.early = rand.Float64()
}
