package lockclient

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxSetSize is the most names one AcquireSet takes: etcd's default
// --max-txn-ops (a lower limit refuses with rpctypes.ErrTooManyOps).
const MaxSetSize = 128

// Acquire takes the lock name, waiting while another holder has it, until it
// is granted or ctx ends. ctx is its only bound: it waits for the holder and,
// while etcd cannot be reached, for etcd; transient etcd errors are retried,
// and a session lost while it waits is replaced.
//
// Errors: fence.ErrInvalidArgument (bad name or option, before any I/O),
// ErrClosed, ctx's error, or etcd's error that is not transient.
func (c *Client) Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.acquireObserved(ctx, []string{name}, opts, true, false)
}

// TryAcquire is Acquire without the wait: when the lock is held it returns at
// once a *HeldError (ErrHeld) naming the holder, having written nothing. A
// transient etcd error is returned, not retried, and a session lost during the
// call is an error matching ErrSessionLost (the next call starts a new one).
// Like every call but the waits, it gives up after the session TTL (or ctx's
// earlier end) while etcd does not answer, with an error matching
// context.DeadlineExceeded; etcd's overload answer is retried within that bound.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.acquireObserved(ctx, []string{name}, opts, false, false)
}

// AcquireSet takes every one of names all-or-nothing, under one token, waiting
// while any is held. It holds none of them while it waits, so sets listed in
// any order cannot deadlock; it is not fair. The set is one *Lock (Resources
// are its names, Resource the first in sorted order) that ends as a whole;
// Holder and List show its names in Info.Set.
//
// Errors are those of Acquire; fence.ErrInvalidArgument also for no names, a
// name listed twice or more than MaxSetSize names.
func (c *Client) AcquireSet(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return c.acquireObserved(ctx, names, opts, true, true)
}

// TryAcquireSet is AcquireSet without the wait, as TryAcquire is Acquire
// without it; its *HeldError names the first held name in sorted order.
func (c *Client) TryAcquireSet(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return c.acquireObserved(ctx, names, opts, false, true)
}

// request is one acquire call: its names, sorted, and what it asks for.
type request struct {
	names []string
	keys  []string
	set   bool // AcquireSet: the value says so, and Holder lists the names
	wait  bool
	lo    lockOptions
}

func (c *Client) acquireObserved(ctx context.Context, names []string, opts []LockOption, wait, set bool) (*Lock, error) {
	first := ""
	if len(names) > 0 {
		first = slices.Min(names)
	}
	return c.observed(ctx, first, wait, func(ctx context.Context) (*Lock, error) {
		r, err := c.newRequest(names, opts, wait, set)
		if err != nil {
			return nil, err
		}
		return c.acquire(ctx, r)
	})
}

// observed runs one acquire call of any kind: a try is bounded like every call
// but a wait (see bounded); the observer and the log see its outcome.
func (c *Client) observed(ctx context.Context, name string, wait bool, run func(context.Context) (*Lock, error)) (l *Lock, err error) {
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	var start time.Time
	if c.obs != nil || c.log != nil {
		start = time.Now()
	}
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if !wait {
		rctx, cancel = c.bounded(ctx)
	}
	l, err = run(rctx)
	cancel()
	err = closedErr(ctx, err) // what the observer sees too
	if c.obs != nil || c.log != nil {
		c.acquired(ctx, name, start, l, err, wait)
	}
	return l, err
}

func (c *Client) newRequest(names []string, opts []LockOption, wait, set bool) (*request, error) {
	r := &request{names: names, set: set, wait: wait}
	var err error
	if set {
		r.names, err = checkSet(names)
	} else {
		err = checkName(names[0])
	}
	if err != nil {
		return nil, err
	}
	if r.lo, err = buildLockOptions(c.ttl, opts); err != nil {
		return nil, err
	}
	r.keys = make([]string, len(r.names))
	for i, n := range r.names {
		r.keys[i] = c.key(n)
	}
	return r, nil
}

// acquire is the one lock path: each attempt is one Txn that creates every key
// under the session lease if none exists, else reads them.
func (c *Client) acquire(ctx context.Context, r *request) (*Lock, error) {
	var lease clientv3.LeaseID
	// Values of attempts whose outcome is unknown (the Txn failed in transit):
	// finding one of them on the keys later means that attempt took the lock.
	var unknown [][]byte
	for {
		cur, err := c.session(ctx) // per attempt: a lost session is replaced
		if err != nil {
			c.forget(r.keys, unknown)
			return nil, err
		}
		if cur != lease {
			lease, unknown = cur, nil // the old lease takes its keys with it
		}
		sent := time.Now()
		val := c.encode(sent, r)
		resp, err := c.txnCreate(ctx, r.keys, lease, val)
		if err != nil {
			unknown = append(unknown, val) // it may have landed, or ctx ended on a Txn that did
			if err := c.retryAcquire(ctx, err, r, lease); err != nil {
				c.forget(r.keys, unknown)
				return nil, err
			}
			continue
		}
		if resp.Succeeded {
			l, err := c.register(c.newLock(r, fence.Token(resp.Header.Revision), lease), sent)
			if r.wait && errors.Is(err, ErrSessionLost) {
				continue
			}
			return l, err
		}
		if l, done, err := c.blocked(ctx, r, resp, lease, unknown); done {
			return l, err
		}
	}
}

// txnCreate sends one attempt: every key put with val under lease if none
// exists. The session's first grant also stores its session key (sessionKey),
// by which Watch tells a release from an expiry.
func (c *Client) txnCreate(ctx context.Context, keys []string, lease clientv3.LeaseID, val []byte) (*clientv3.TxnResponse, error) {
	cmps := make([]clientv3.Cmp, len(keys))
	puts := make([]clientv3.Op, len(keys), len(keys)+1)
	gets := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
		puts[i] = clientv3.OpPut(k, string(val), clientv3.WithLease(lease))
		gets[i] = clientv3.OpGet(k)
	}
	c.mu.Lock()
	mark := c.marked != lease && len(keys) < MaxSetSize // a Txn takes at most MaxSetSize operations
	c.mu.Unlock()
	if mark {
		puts = append(puts, clientv3.OpPut(sessionKey(c.prefix, int64(lease)), "", clientv3.WithLease(lease)))
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
	})
	if mark && err == nil && resp.Succeeded {
		c.mu.Lock()
		if c.lease == lease {
			c.marked = lease
		}
		c.mu.Unlock()
	}
	return resp, err
}

// blocked handles an attempt that found keys. It is done when an earlier
// attempt of this call had taken every key (registered and returned), for a
// try (a *HeldError), or when the wait fails; otherwise the keys that blocked
// it were deleted and the caller tries again.
func (c *Client) blocked(ctx context.Context, r *request, resp *clientv3.TxnResponse, lease clientv3.LeaseID, unknown [][]byte) (*Lock, bool, error) {
	var held, ours, orphans []*mvccpb.KeyValue
	for _, rr := range resp.Responses {
		kvs := rr.GetResponseRange().GetKvs()
		switch {
		case len(kvs) == 0:
		case isMark(kvs[0].Value): // checked by the Txn: the key etcd compared
			return nil, true, semaphoreErr("Acquire", c.nameOf(kvs[0]))
		case clientv3.LeaseID(kvs[0].Lease) != lease && bytes.HasPrefix(kvs[0].Value, c.valuePrefix):
			orphans = append(orphans, kvs[0])
		case clientv3.LeaseID(kvs[0].Lease) == lease && slices.ContainsFunc(unknown, func(v []byte) bool { return string(v) == string(kvs[0].Value) }):
			ours = append(ours, kvs[0])
		default:
			held = append(held, kvs[0])
		}
	}
	if len(orphans) > 0 {
		if err := c.dropOrphans(ctx, orphans); err == nil {
			return nil, false, nil
		}
		held = append(held, orphans...) // not deleted: waited out like any other
	}
	if len(ours) == len(r.names) {
		// An earlier attempt whose answer was lost took every key.
		info := decodeInfo(r.names[0], ours[0])
		l, err := c.register(c.newLock(r, info.Token, lease), info.AcquiredAt)
		return l, true, err
	}
	if len(ours) > 0 {
		// Part of an earlier attempt's keys is left (someone deleted the rest):
		// give it up, and wait for those keys like any other.
		c.forget(r.keys, unknown)
		held = append(held, ours...)
	}
	if len(held) == 0 {
		return nil, false, nil // cannot happen: the compare failed, so a key existed
	}
	if !r.wait {
		info := decodeInfo(c.nameOf(held[0]), held[0])
		return nil, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
	}
	c.waiting(ctx, c.nameOf(held[0]), held[0])
	for _, kv := range held {
		if err := c.waitDeleted(ctx, string(kv.Key), resp.Header.Revision); err != nil {
			c.forget(r.keys, unknown)
			return nil, true, err
		}
	}
	return nil, false, nil
}

// dropOrphans deletes keys this Client created under a session it has lost,
// whose Locks have all ended, rather than wait their lease out. Each delete is
// conditioned on the key's create revision.
func (c *Client) dropOrphans(ctx context.Context, kvs []*mvccpb.KeyValue) error {
	ops := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		cmp := clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{cmp}, []clientv3.Op{clientv3.OpDelete(string(kv.Key))}, nil)
	}
	_, err := retryOverload(ctx, c, "release", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).Then(ops...).Commit()
	})
	return err
}

func (c *Client) nameOf(kv *mvccpb.KeyValue) string { return string(kv.Key[len(c.prefix):]) }

// forget queues deletes of the keys attempts with an unknown outcome may have
// created, so that a lock nobody will use does not stay held for the session's
// life; each delete is conditioned on the exact value the attempt wrote.
func (c *Client) forget(keys []string, vals [][]byte) {
	for _, k := range keys {
		for _, v := range vals {
			c.addPending(pendingDelete{key: k, cmp: clientv3.Compare(clientv3.Value(k), "=", string(v))})
		}
	}
}

// register records a granted lock under each of its names. If the session
// ended meanwhile, the keys go with it and the session's error is returned;
// after Close they are deleted.
func (c *Client) register(l *Lock, sent time.Time) (*Lock, error) {
	c.mu.Lock()
	if c.state != live || c.lease != l.lease {
		st := c.state
		c.mu.Unlock()
		l.cancel(stateErr(st))
		if st != closed {
			return nil, fmt.Errorf("%w: lost while acquiring %s", ErrSessionLost, label(l.names, l.set))
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.deleteKeys(ctx, l.names, l.token, l.set)
		return nil, ErrClosed
	}
	// The first lock of an idle session wakes the loop: the busy cadence may
	// want a renewal now.
	poke := len(c.locks) == 0
	// A lock of ours still registered under one of these names cannot hold the
	// key we just created: it was released by token elsewhere or expired. It is lost.
	var olds []*Lock
	for _, n := range l.names {
		if old := c.locks[n]; old != nil && old != l {
			c.unregisterLocked(old)
			olds = append(olds, old)
		}
		c.locks[n] = l
	}
	if l.watch {
		c.loops.Add(1)
		go c.followKey(l)
	}
	if l.manual {
		l.deadline = sent.Add(l.dur)
		heap.Push(&c.manual, l)
		if c.manual[0] == l {
			c.armLocked()
		}
	}
	c.mu.Unlock()
	c.armMaxHold(l, sent)
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
	c.dropLocked(l)
	return true
}

func (c *Client) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}
