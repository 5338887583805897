package lockclient

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
		return // the session lease is gone or being revoked: its keys go with it
	}
	c.pending = append(c.pending, p)
	c.mu.Unlock()
	c.wake()
}

type renewal struct {
	sent time.Time
	ttl  int64
	err  error
}

// loop is the Client's one goroutine. It renews the session lease every interval
// (sending the keepalive itself, so that the deadline counts from the send
// time), declares the session lost when the deadline passes without a confirmed
// renewal, expires manual-renewal locks that were not renewed in time, and
// retries pending deletes. A keepalive or a delete batch runs in a short-lived
// goroutine of its own (at most one of each at a time), so that a slow etcd
// delays no deadline.
func (c *Client) loop() {
	defer close(c.loopDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	renewc := make(chan renewal, 1)
	delc := make(chan error, 1)
	renewing, deleting := false, false
	var batch int // pending deletes in flight
	nextRenew := time.Now().Add(c.interval)
	var nextDelete time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	for {
		now := time.Now()
		c.mu.Lock()
		if c.state != live {
			c.mu.Unlock()
			return
		}
		lease, deadline := c.lease, c.deadline
		if !now.Before(deadline) {
			c.mu.Unlock()
			c.loseSession("no renewal confirmed before the session deadline")
			c.revoke(lease)
			return
		}
		var expired []*Lock
		for len(c.manual) > 0 && !now.Before(c.manual[0].deadline) {
			l := heap.Pop(&c.manual).(*Lock)
			delete(c.locks, l.name)
			expired = append(expired, l)
			key := c.key(l.name)
			c.pending = append(c.pending, pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))})
		}
		var todo []pendingDelete
		if !deleting && len(c.pending) > 0 && !now.Before(nextDelete) {
			todo = append(todo, c.pending...)
			batch = len(todo)
		}
		wake := deadline
		if len(c.manual) > 0 && c.manual[0].deadline.Before(wake) {
			wake = c.manual[0].deadline
		}
		c.mu.Unlock()

		for _, l := range expired {
			l.lose(EndNotRenewed)
		}
		if !renewing && !now.Before(nextRenew) {
			renewing = true
			go func() {
				kctx, kcancel := context.WithDeadline(ctx, deadline)
				defer kcancel()
				r := renewal{sent: time.Now()}
				resp, err := c.cli.KeepAliveOnce(kctx, lease)
				if err == nil {
					r.ttl = resp.TTL
				}
				r.err = err
				if c.obs != nil || c.log != nil {
					c.keptAlive(lease, time.Since(r.sent), deadline, err)
				}
				renewc <- r
			}()
		}
		if todo != nil {
			deleting = true
			go func() { delc <- c.deleteBatch(ctx, todo, deadline) }()
		}
		if !renewing && nextRenew.Before(wake) {
			wake = nextRenew
		}
		if !deleting && len(todo) == 0 && !nextDelete.IsZero() && nextDelete.Before(wake) {
			wake = nextDelete
		}
		timer.Reset(time.Until(wake))

		select {
		case <-c.stop:
			return
		case <-c.poke:
		case <-timer.C:
		case r := <-renewc:
			renewing = false
			switch {
			case r.err == nil && r.ttl > 0:
				c.mu.Lock()
				if d := r.sent.Add(time.Duration(r.ttl) * time.Second); d.After(c.deadline) {
					c.deadline = d
				}
				c.mu.Unlock()
				nextRenew = r.sent.Add(c.interval)
			case r.err == nil || errors.Is(r.err, rpctypes.ErrLeaseNotFound):
				// etcd no longer has the lease: it expired there.
				c.loseSession("etcd no longer has the session lease")
				return
			default:
				nextRenew = time.Now().Add(min(retryDelay, c.interval))
			}
		case err := <-delc:
			deleting = false
			if err != nil {
				nextDelete = time.Now().Add(retryDelay)
				break
			}
			nextDelete = time.Time{}
			c.mu.Lock()
			if len(c.pending) >= batch {
				c.pending = append(c.pending[:0:0], c.pending[batch:]...)
			}
			c.mu.Unlock()
		}
	}
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

// revoke gives up a lost session's lease at once, so that its keys do not wait
// out the TTL on the server when etcd can still be reached.
func (c *Client) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), c.interval)
	defer cancel()
	c.cli.Revoke(ctx, lease)
}
