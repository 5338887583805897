package lockclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// retryDelay spaces retries after a transient etcd error (no leader, a member
// down), so a waiting Acquire does not spin while the cluster elects.
const retryDelay = 100 * time.Millisecond

// Acquire takes the lock name, waiting while another holder has it, until it is
// granted or ctx ends; ctx governs the wait and every etcd call. Each attempt is
// one etcd Txn that creates the key under the session lease if it is absent; the
// lock's token is the key's create revision, higher than every token granted
// before for any name. While the lock is held, Acquire watches the key for its
// deletion and writes nothing. Transient etcd errors (no leader, a member down)
// are retried until ctx ends. If the Client has no session (its first call, or
// its last session was lost), Acquire first grants one; if the session is lost
// while Acquire waits, it goes on under a new one.
//
// Before any I/O it returns an error wrapping fence.ErrInvalidArgument for a
// bad name or a bad option. Other errors: ErrClosed after Close, ctx's error, or etcd's error that is not transient
// (a failed session grant included).
func (c *Client) Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	if c.obs == nil && c.log == nil {
		return c.acquire(ctx, name, opts, true, nil)
	}
	start := time.Now()
	l, err := c.acquire(ctx, name, opts, true, nil)
	c.acquired(ctx, name, start, l, err, true)
	return l, err
}

// TryAcquire takes the lock name if nobody holds it, and otherwise returns at once
// a *HeldError (errors.Is(err, ErrHeld)) carrying the holder and its token. It is
// one etcd Txn and writes nothing when the lock is held. ctx governs the call.
// Other errors are those of Acquire; a transient etcd error is returned, not
// retried, and so is an error matching ErrSessionLost when the session was lost
// during the call (the next call starts a new one).
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	if c.obs == nil && c.log == nil {
		return c.acquire(ctx, name, opts, false, nil)
	}
	start := time.Now()
	l, err := c.acquire(ctx, name, opts, false, nil)
	c.acquired(ctx, name, start, l, err, false)
	return l, err
}

// acquire takes name; value, when not nil, is stored with the key (Lead's
// WithValue) and shown as Info.Value.
func (c *Client) acquire(ctx context.Context, name string, opts []LockOption, wait bool, value []byte) (*Lock, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	lo, err := buildLockOptions(c.ttl, opts)
	if err != nil {
		return nil, err
	}
	key := c.key(name)
	var lease clientv3.LeaseID
	// Values of attempts whose outcome is unknown (the Txn failed in transit):
	// finding one of them on the key later means that attempt took the lock.
	var unknown [][]byte
	for {
		// The session of every attempt: a waiting Acquire whose session was lost
		// goes on under a new one.
		cur, err := c.session(ctx)
		if err != nil {
			c.forget(key, unknown)
			return nil, err
		}
		if cur != lease {
			lease, unknown = cur, nil // the old lease takes its keys with it
		}
		sent := time.Now()
		val := c.encodeValue(sent, value)
		resp, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			unknown = append(unknown, val) // it may have landed, or ctx ended on a Txn that did
			if retry, err := c.retryAcquire(ctx, err, wait, name, lease); !retry {
				c.forget(key, unknown)
				return nil, err
			}
			continue
		}
		if resp.Succeeded {
			l, err := c.register(name, fence.Token(resp.Header.Revision), lease, sent, lo)
			if wait && errors.Is(err, ErrSessionLost) {
				continue
			}
			return l, err
		}
		if l, done, err := c.blocked(ctx, name, resp, lease, unknown, lo, wait); done {
			return l, err
		}
	}
}

// retryAcquire decides what a failed acquire Txn means: try again (at once
// under a new session, or after a pause for a transient error while waiting),
// or give up with the error to return.
func (c *Client) retryAcquire(ctx context.Context, err error, wait bool, name string, lease clientv3.LeaseID) (bool, error) {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		c.loseLease(lease, "etcd no longer has the session lease")
		if wait {
			return true, nil
		}
		return false, fmt.Errorf("%w: lease not found while acquiring %q", ErrSessionLost, name)
	case transient(ctx, err) && wait:
		if err := c.sleep(ctx, retryDelay); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("lockclient: acquire %q: %w", name, c.denied(err))
}

// blocked handles an acquire Txn that found name's key. It is done when an
// earlier attempt of this call had taken the lock (registered and returned),
// for TryAcquire (a *HeldError), or when the wait for the key's deletion fails;
// otherwise the key was deleted and the caller tries again.
func (c *Client) blocked(ctx context.Context, name string, resp *clientv3.TxnResponse, lease clientv3.LeaseID, unknown [][]byte, lo lockOptions, wait bool) (l *Lock, done bool, err error) {
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, false, nil // cannot happen: the compare failed, so the key existed in this Txn
	}
	kv := kvs[0]
	if clientv3.LeaseID(kv.Lease) == lease && isOneOf(kv.Value, unknown) {
		// An earlier attempt whose answer was lost did take the lock.
		info := decodeInfo(name, kv)
		l, err := c.register(name, info.Token, lease, info.AcquiredAt, lo)
		return l, true, err
	}
	if !wait {
		info := decodeInfo(name, kv)
		return nil, true, &HeldError{Name: name, Holder: info, Token: info.Token}
	}
	c.waiting(ctx, name, kv)
	if err := c.waitDelete(ctx, c.key(name), resp.Header.Revision); err != nil {
		c.forget(c.key(name), unknown)
		return nil, true, err
	}
	return nil, false, nil
}

// waitDelete watches key from the revision after rev until it is deleted (or the
// watch breaks, which the caller answers by trying again).
func (c *Client) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	for {
		select {
		case <-c.done:
			c.mu.Lock()
			st := c.state
			c.mu.Unlock()
			return stateErr(st)
		case wr, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				return c.sleep(ctx, retryDelay)
			}
			if wr.Err() != nil {
				// Compacted, no leader, cancelled: the Txn tells what is true now.
				return c.sleep(ctx, retryDelay)
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		c.mu.Lock()
		st := c.state
		c.mu.Unlock()
		return stateErr(st)
	}
}

// forget queues deletes of the keys an attempt with an unknown outcome may have
// created, so that a lock nobody will use does not stay held for the session's
// life. The delete is conditioned on the exact value that attempt wrote.
func (c *Client) forget(key string, vals [][]byte) {
	for _, v := range vals {
		c.addPending(pendingDelete{key: key, cmp: clientv3.Compare(clientv3.Value(key), "=", string(v))})
	}
}

func isOneOf(v []byte, vals [][]byte) bool {
	for _, u := range vals {
		if string(u) == string(v) {
			return true
		}
	}
	return false
}

// register records a granted lock. If the session ended meanwhile, the key is
// deleted again and the session's error returned.
func (c *Client) register(name string, token fence.Token, lease clientv3.LeaseID, sent time.Time, lo lockOptions) (*Lock, error) {
	return c.registerLock(newLock(c, name, token, lease, lo), sent, lo)
}

// registerLock records l, a single lock or a set, under each of its names.
func (c *Client) registerLock(l *Lock, sent time.Time, lo lockOptions) (*Lock, error) {
	name, lease := l.name, l.lease
	c.mu.Lock()
	if c.state != live || c.lease != lease {
		st := c.state
		c.mu.Unlock()
		l.cancel(stateErr(st))
		if st != closed {
			// The lease is gone or going; its keys go with it.
			return nil, fmt.Errorf("%w: lost while acquiring %q", ErrSessionLost, name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.deleteLock(ctx, l)
		return nil, ErrClosed
	}
	// A lock of ours still registered under one of these names cannot hold the
	// key we just created: it was released by token elsewhere or expired. It is lost.
	// The first lock of an idle session wakes the loop: the busy cadence may
	// want a renewal now (see renewal).
	poke := len(c.locks) == 0
	olds := c.replaceLocked(l)
	if lo.manual {
		l.deadline = sent.Add(lo.lease)
		c.manual.push(l)
		poke = poke || c.manual[0] == l
	}
	c.mu.Unlock()
	for _, old := range olds {
		old.lose(nil)
	}
	if poke {
		c.wake()
	}
	return l, nil
}

// unregisterLocked removes l from the registry; it reports whether l was there.
func (c *Client) unregisterLocked(l *Lock) bool {
	if c.locks[l.name] != l {
		return false
	}
	delete(c.locks, l.name)
	for _, n := range l.names { // a set's other names (its first is l.name)
		if c.locks[n] == l {
			delete(c.locks, n)
		}
	}
	if l.index >= 0 {
		c.manual.remove(l)
	}
	return true
}

func (c *Client) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}
