package lockclient

import (
	"time"

	"github.com/fencegate/fencegate/lockclient/internal/keepalive"
)

// CheckLockName is checkName, for the fuzz test of lock name validation.
var CheckLockName = checkName

// RenewAlwaysBusy makes c renew as if it always held a lock: the cadence of
// every session before idle ones renewed less often, which the degradation
// test measures against. Call it before c's first Acquire.
func RenewAlwaysBusy(c *Client) { c.idle = c.interval }

// SessionDeadline returns c's conservative session deadline; zero before its
// first session.
func SessionDeadline(c *Client) time.Time {
	_, _, deadline := c.sess.current()
	return deadline
}

// RenewalDue returns when a Client built with opts sends its next keepalive,
// with no jitter: its latest keepalive went out at last, etcd answered it
// (answered) slowly (slow) or not, and it holds a lock (busy) or none.
func RenewalDue(opts []Option, last time.Time, answered, slow, busy bool) (time.Time, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return time.Time{}, err
	}
	r := keepalive.NewCadence(o.ttl, o.interval, o.idle, last)
	r.Restore(last, answered, slow)
	return r.Next(busy), nil
}

// LoseSession ends c's session here, as a session deadline that passed would,
// while etcd still has its lease (nobody renews it any more).
func LoseSession(c *Client) {
	_, lease, _ := c.sess.current()
	c.loseLease(lease, "lost by the test")
}

// SetUnreachableEvery sets how often c reports a wait on an unreachable etcd;
// call it before c's first call.
func SetUnreachableEvery(c *Client, d time.Duration) { c.unreachableEvery = d }

// SessionLease returns c's session lease; 0 when it has none.
func SessionLease(c *Client) int64 {
	_, lease, _ := c.sess.current()
	return int64(lease)
}
