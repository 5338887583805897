package lockclient

import (
	"context"
	"errors"
	"time"
)

// WithMaxHold caps how long the lock (a permit, a term of Lead) is held: at d
// after its acquire was sent it ends by itself, even while every renewal
// succeeds, with a cause matching ErrMaxHold and fence.ErrLost, and its keys
// are deleted (conditioned on its token) so the next holder is granted at once.
// A stuck holder then cannot keep a lock forever; its late writes are fenced as
// any lost holder's. d must be at least the lock's lease (the session TTL, or
// WithManualRenewal's lease).
func WithMaxHold(d time.Duration) LockOption {
	return func(o *lockOptions) error {
		if d <= 0 {
			return invalid("WithMaxHold(%v): not positive", d)
		}
		o.maxHold = d
		return nil
	}
}

// checkMaxHold refuses a max hold below the lock's lease: the grant would end
// before its holder could even be told it is lost by its lease.
func checkMaxHold(o lockOptions, sessionTTL time.Duration) error {
	lease := sessionTTL
	if o.manual {
		lease = o.lease
	}
	if o.maxHold > 0 && o.maxHold < lease {
		return invalid("WithMaxHold(%v): under the lock's lease %v", o.maxHold, lease)
	}
	return nil
}

// armMaxHold ends l at its max hold, counted from sent, on a timer stopped
// when l ends first: no goroutine waits for it.
func (c *Client) armMaxHold(l *Lock, sent time.Time) {
	if l.maxHold <= 0 {
		return
	}
	t := time.AfterFunc(time.Until(sent.Add(l.maxHold)), func() { c.maxHoldReached(l) })
	context.AfterFunc(l.ctx, func() { t.Stop() })
}

// maxHoldReached ends l with ErrMaxHold if it is still held, then deletes its
// keys as Release does.
func (c *Client) maxHoldReached(l *Lock) {
	c.mu.Lock()
	held := c.unregisterLocked(l)
	c.mu.Unlock()
	if !held {
		return
	}
	l.lose(ErrMaxHold)
	if len(l.names) > 1 {
		return // lose dropped the set's keys
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	var nh *NotHeldError
	if err := c.deleteKeys(ctx, l.names, l.keys, l.token, l.set); err != nil && !errors.As(err, &nh) {
		c.pendDeletes(l.keys, l.token)
	}
}
