package lockclient

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/internal/grant"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// regrantBackoff is the first window of the jittered backoff before a new
// session after a lost one; each further loss (or failed grant) before a
// session is renewed doubles it, up to half the TTL. A new session is granted only
// by an Acquire, so regrants also follow the callers' own pace: many Clients
// that lose their sessions together come back spread out, not at once.
const regrantBackoff = 500 * time.Millisecond

// stateErr is the error for a client that has no session to grant locks under.
func stateErr(s state) error {
	if s == closed {
		return ErrClosed
	}
	return ErrSessionLost
}

// session returns the live session lease, granting one if there is none (the
// first use, or after a lost session, once its backoff has passed). ctx governs
// the wait and the grant.
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
		if err := c.pause(ctx, wait); err != nil {
			return err
		}
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
		return fmt.Errorf("lockclient: grant session lease: %w", c.denied(err))
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
	c.deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
	ended := make(chan struct{})
	c.ended = ended
	c.loops.Add(1)
	c.mu.Unlock()
	go c.loop(resp.ID, ended, sent)
	c.sessionStarted(resp.ID)
	return nil
}

// pause waits d before a new session, or returns ctx's error or ErrClosed.
func (c *Client) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop:
		return ErrClosed
	}
}

// backoffLocked pushes the next grant back by a random part of a window that
// doubles with each loss in a row.
func (c *Client) backoffLocked() {
	c.failures++
	window := min(c.ttl/2, regrantBackoff<<min(c.failures-1, 16))
	c.notBefore = time.Now().Add(rand.N(window))
}

// loseLease ends session lease if it is still the Client's session: every lock
// of it ends with a cause matching both fence.ErrLost and ErrSessionLost, and
// the next Acquire starts a new session after the backoff. The lease is not
// revoked: etcd expires it by itself (or already has), and a revoke is one more
// synchronous write just when etcd is slow.
func (c *Client) loseLease(lease clientv3.LeaseID, why string) {
	c.mu.Lock()
	if c.state != live || c.lease != lease {
		c.mu.Unlock()
		return
	}
	c.state = idle
	c.lease = 0
	close(c.ended)
	c.backoffLocked()
	locks := c.takeLocksLocked()
	c.mu.Unlock()
	c.sessionLost(lease, why, len(locks))
	for _, l := range locks {
		l.end(fmt.Errorf("%w: %w", grant.Lost(l.name, l.token), ErrSessionLost))
	}
}

// expireManualLocked ends the manual-renewal locks whose deadline passed and
// queues the deletes of their keys; the caller ends the returned locks as lost
// once c.mu is released.
func (c *Client) expireManualLocked(now time.Time) []*Lock {
	var expired []*Lock
	for len(c.manual) > 0 && !now.Before(c.manual[0].deadline) {
		l := heap.Pop(&c.manual).(*Lock)
		delete(c.locks, l.name)
		expired = append(expired, l)
		key := c.key(l.name)
		c.pending = append(c.pending, pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))})
	}
	return expired
}

// pendingDelete is a conditional delete the client retries until etcd has
// answered it: a release whose Txn failed in transit, an expired manual-renewal
// lock, an acquire attempt whose outcome is unknown.
type pendingDelete struct {
	key string
	cmp clientv3.Cmp
}

// maxDeletesPerTxn keeps a batch of deletes under etcd's default limit of 128
// operations per Txn.
const maxDeletesPerTxn = 64

func (c *Client) addPending(p pendingDelete) {
	c.mu.Lock()
	if c.state != live {
		c.mu.Unlock()
		return // no session: the lease its key was under is gone or going, and the key with it
	}
	c.pending = append(c.pending, p)
	c.mu.Unlock()
	c.wake()
}

// deleteBatch sends the deletes, each conditioned on its own compare, as nested
// Txns: one etcd write per batch however many locks expired together.
func (c *Client) deleteBatch(ctx context.Context, todo []pendingDelete, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for len(todo) > 0 {
		n := min(len(todo), maxDeletesPerTxn)
		ops := make([]clientv3.Op, n)
		for i, p := range todo[:n] {
			ops[i] = clientv3.OpTxn([]clientv3.Cmp{p.cmp}, []clientv3.Op{clientv3.OpDelete(p.key)}, nil)
		}
		if _, err := c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
		todo = todo[n:]
	}
	return nil
}
