package lockclient

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/internal/grant"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// session returns the live session lease, granting one if there is none, once
// the backoff after a loss has passed. ctx governs the wait and the grant.
func (c *Client) session(ctx context.Context) (clientv3.LeaseID, error) {
	for {
		c.mu.Lock()
		st, id := c.state, c.lease
		c.mu.Unlock()
		switch st {
		case live:
			return id, nil
		case closed:
			return 0, ErrClosed
		}
		select {
		case c.grantSem <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.done:
			continue
		}
		err := c.grant(ctx)
		<-c.grantSem
		if err != nil {
			return 0, err
		}
	}
}

func (c *Client) grant(ctx context.Context) error {
	c.mu.Lock()
	st, wait := c.state, time.Until(c.notBefore)
	c.mu.Unlock()
	if st != idle {
		return nil // granted (or closed) while this caller waited
	}
	if wait > 0 {
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
	if err := c.connected(ctx); err != nil {
		return fmt.Errorf("lockclient: grant session lease: no connection to etcd: %w", c.explain(ctx, err))
	}
	sent := time.Now()
	resp, err := retryOverload(ctx, c, "grant", func() (*clientv3.LeaseGrantResponse, error) {
		return c.cli.Grant(ctx, int64(c.ttl/time.Second))
	})
	if err != nil {
		if ctx.Err() == nil {
			c.mu.Lock()
			c.backoffLocked()
			c.mu.Unlock()
		}
		return fmt.Errorf("lockclient: grant session lease: %w", c.explain(ctx, err))
	}
	c.mu.Lock()
	if c.state != idle { // closed meanwhile
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.cli.Revoke(rctx, resp.ID)
		return ErrClosed
	}
	c.state = live
	c.lease = resp.ID
	c.granted = time.Duration(resp.TTL) * time.Second
	c.deadline = sent.Add(c.granted)
	c.expiry = time.AfterFunc(time.Until(c.deadline), func() { c.expire(resp.ID) })
	ended := make(chan struct{})
	c.ended = ended
	c.loops.Add(1)
	c.mu.Unlock()
	go c.loop(resp.ID, ended, sent)
	c.sessionStarted(resp.ID, time.Duration(resp.TTL)*time.Second)
	return nil
}

// errEtcdClosed means the etcd client given to New was closed.
var errEtcdClosed = errors.New("the etcd client was closed")

// connected waits until the etcd client's connection is up, so that a grant's
// send time, from which the session deadline counts, is not spent dialing.
// Each interval it waits is reported (unreachable).
func (c *Client) connected(ctx context.Context) error {
	conn := c.cli.ActiveConnection()
	start := time.Now()
	next := start.Add(reportEvery())
	for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
		switch st {
		case connectivity.Idle:
			conn.Connect()
		case connectivity.Shutdown:
			return errEtcdClosed
		}
		wctx, cancel := context.WithDeadline(ctx, next)
		changed := conn.WaitForStateChange(wctx, st)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case !changed:
			c.unreachable(time.Since(start), connError(ctx, conn, st))
			next = time.Now().Add(reportEvery())
		}
	}
	return nil
}

// expire is the session's clock, a timer of its own (c.expiry) that no etcd
// call can hold back: at the session deadline, without a confirmed renewal,
// the session is lost; at a manual-renewal lock's deadline, that lock is
// (ErrNotRenewed) and its keys are queued for deletion.
func (c *Client) expire(lease clientv3.LeaseID) {
	c.mu.Lock()
	if c.state != live || c.lease != lease {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	expired := c.expireManualLocked(now)
	past := !now.Before(c.deadline)
	if !past {
		c.armLocked()
	}
	c.mu.Unlock()
	for _, l := range expired {
		l.lose(ErrNotRenewed)
	}
	if len(expired) > 0 {
		c.wake() // their deletes
	}
	if past {
		c.loseLease(lease, "no renewal confirmed before the session deadline")
	}
}

// armLocked sets the session's clock to the next deadline: the session's, or
// a manual-renewal lock's if sooner. Deadlines that move later need no call:
// the clock looks again when it fires.
func (c *Client) armLocked() {
	next := c.deadline
	if len(c.manual) > 0 && c.manual[0].deadline.Before(next) {
		next = c.manual[0].deadline
	}
	c.expiry.Reset(time.Until(next))
}

// loseLease ends session lease if it is still the Client's: every lock of it
// ends (fence.ErrLost and ErrSessionLost), and the next Acquire starts a new
// session after the backoff. The lease is not revoked: etcd expires it.
func (c *Client) loseLease(lease clientv3.LeaseID, why string) {
	c.mu.Lock()
	if c.state != live || c.lease != lease {
		c.mu.Unlock()
		return
	}
	c.state = idle
	c.lease = 0
	c.expiry.Stop()
	close(c.ended)
	c.backoffLocked()
	locks := c.takeLocksLocked()
	c.mu.Unlock()
	for _, l := range locks {
		l.end(fmt.Errorf("%w: %w", grant.Lost(l.name, l.token), ErrSessionLost))
	}
	c.sessionLost(lease, why, len(locks))
}

// keyGone ends l as lost because its key is gone or carries another token.
// When l's session lease ran out (its local deadline passed, or etcd no
// longer has it) that is the cause, as for every lock of the session: a key
// deleted by the lease's expiry was not deleted by someone else.
func (c *Client) keyGone(ctx context.Context, l *Lock) {
	if l.ctx.Err() != nil {
		return // ended meanwhile (released, lost, closed)
	}
	c.mu.Lock()
	st, lease, deadline := c.state, c.lease, c.deadline
	c.mu.Unlock()
	if st != live || lease != l.lease {
		return // the session ended, and every lock of it with it
	}
	why := ""
	if !time.Now().Before(deadline) {
		why = "no renewal confirmed before the session deadline"
	} else if resp, err := c.cli.TimeToLive(ctx, lease); err == nil && resp.TTL < 0 {
		// -1: gone. etcd rounds what is left down to whole seconds, so a live
		// lease with under a second left says 0.
		why = "etcd no longer has the session lease"
	}
	if why != "" {
		c.loseLease(lease, why)
		return
	}
	c.mu.Lock()
	held := c.unregisterLocked(l)
	c.mu.Unlock()
	if held {
		l.lose(nil)
	}
}

// sessionKey is the key a session stores under its lease with its first
// grant. etcd deletes a lease's keys at one revision, so a lock key deleted at
// a revision where its session's key still exists was released, not expired.
// The NUL byte keeps it out of every lock name.
func sessionKey(prefix string, lease int64) string {
	return prefix + "\x00session/" + strconv.FormatInt(lease, 16)
}

// expireManualLocked ends the manual-renewal locks whose deadline passed and
// queues their keys' deletes; the caller ends them once c.mu is released.
func (c *Client) expireManualLocked(now time.Time) []*Lock {
	var expired []*Lock
	for len(c.manual) > 0 && !now.Before(c.manual[0].deadline) {
		l := heap.Pop(&c.manual).(*Lock)
		delete(c.locks, l.name)
		expired = append(expired, l)
		key := l.keys[0]
		c.pending = append(c.pending, pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))})
	}
	return expired
}

// lockHeap orders manual-renewal locks by deadline, for the session's clock.
type lockHeap []*Lock

func (h lockHeap) Len() int { return len(h) }

func (h lockHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.index = len(*h)
	*h = append(*h, l)
}

func (h *lockHeap) Pop() any {
	old := *h
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.index = -1
	*h = old[:n-1]
	return l
}
