package lockclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Acquire takes the lock name, waiting while another holder has it, until it
// is granted or ctx ends. ctx is its only bound: it waits for the holder and,
// while etcd cannot be reached, for etcd; transient etcd errors are retried,
// and a session lost while it waits is replaced.
//
// Errors: fence.ErrInvalidArgument (bad name or option, before any I/O),
// ErrClosed, ctx's error, or etcd's error that is not transient.
func (c *Client) Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.acquireNames(ctx, []string{name}, opts, true, false)
}

// TryAcquire is Acquire without the wait: when the lock is held it returns at
// once a *HeldError (ErrHeld) naming the holder, having written nothing. A
// transient etcd error is returned, not retried, and a session lost during the
// call is an error matching ErrSessionLost (the next call starts a new one).
// Like every call but the waits, it gives up after the session TTL (or ctx's
// earlier end) while etcd does not answer, with an error matching
// context.DeadlineExceeded; etcd's overload answer is retried within that bound.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.acquireNames(ctx, []string{name}, opts, false, false)
}

// AcquireSet takes every one of names all-or-nothing, under one token, waiting
// while any is held. It holds none of them while it waits, so sets listed in
// any order cannot deadlock; it keeps no place in line, so it is not fair. The set is one *Lock (Resources
// are its names, Resource the first in sorted order) that ends as a whole;
// Holder and List show its names in Info.Set.
//
// Errors are those of Acquire; fence.ErrInvalidArgument also for no names, a
// name listed twice or more than 128 names (etcd's default --max-txn-ops).
func (c *Client) AcquireSet(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return c.acquireNames(ctx, names, opts, true, true)
}

// TryAcquireSet is AcquireSet without the wait, as TryAcquire is Acquire
// without it; its *HeldError names the first held name in sorted order.
func (c *Client) TryAcquireSet(ctx context.Context, names []string, opts ...LockOption) (*Lock, error) {
	return c.acquireNames(ctx, names, opts, false, true)
}

// request is one acquire call: its names (sorted; a permit's semaphore name)
// and what it asks for, and its kind: what it takes and how it waits.
type request struct {
	names []string
	set   bool // AcquireSet: the value says so, and Holder lists the names
	wait  bool
	lo    lockOptions
	kind  kind
}

// kind is what differs between the calls of the one attempt loop: names
// (Acquire, AcquireSet: every key or none) and a permit (AcquirePermit: a free
// slot). A kind is per call and keeps its state between attempts.
type kind interface {
	// try sends one attempt, putting val under a.lease: the grant it got, or
	// nil when refused (kept for blocked); on an error, the keys it may have put.
	try(ctx context.Context, a *attempt, val []byte) (g *granted, maybe []string, err error)
	// blocked reads the last refusal: a grant an earlier attempt of the call
	// took (its answer lost), done with an error (a try's *HeldError, a name of
	// the other kind, a failed wait), or neither: try again.
	blocked(ctx context.Context, a *attempt) (g *granted, done bool, err error)
}

// granted is what an attempt took: the Lock's names and token, and when the
// attempt was sent (max hold and manual renewal count from then).
type granted struct {
	names []string
	keys  []string
	token fence.Token
	sent  time.Time
}

// attempt is one call's state under one session lease.
type attempt struct {
	c     *Client
	r     *request
	lease clientv3.LeaseID
	// Attempts whose outcome is unknown (the Txn failed in transit): finding
	// one's value on a key later means that attempt took it.
	unknown []tried
}

// tried is an attempt of unknown outcome: a key it may have put, with its value.
type tried struct{ key, val string }

// ours reports whether kv was put by an attempt of this call whose answer was lost.
func (a *attempt) ours(kv *mvccpb.KeyValue) bool {
	return clientv3.LeaseID(kv.Lease) == a.lease &&
		slices.ContainsFunc(a.unknown, func(t tried) bool { return t.val == string(kv.Value) })
}

// found turns an earlier attempt's keys (kv's value) into a grant.
func (a *attempt) found(names, keys []string, kv *mvccpb.KeyValue) *granted {
	a.keep(kv)
	info := decodeInfo(names[0], kv)
	return &granted{names: names, keys: keys, token: info.Token, sent: info.AcquiredAt}
}

// keep forgets the call's unknown attempts but kv's.
func (a *attempt) keep(kv *mvccpb.KeyValue) {
	a.c.forget(slices.DeleteFunc(a.unknown, func(t tried) bool { return t.val == string(kv.Value) }))
	a.unknown = []tried{{string(kv.Key), string(kv.Value)}}
}

func (c *Client) acquireNames(ctx context.Context, names []string, opts []LockOption, wait, set bool) (*Lock, error) {
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
	k := &namesKind{keys: make([]string, len(r.names)), line: wait && !set}
	for i, n := range r.names {
		k.keys[i] = c.key(n)
	}
	r.kind = k
	return r, nil
}

// acquire is the one attempt loop, for every kind: session, encode, one Txn,
// then register the grant, or read the refusal and wait.
func (c *Client) acquire(ctx context.Context, r *request) (*Lock, error) {
	a := &attempt{c: c, r: r}
	for {
		lease, err := c.session(ctx) // per attempt: a lost session is replaced
		if err != nil {
			c.forget(a.unknown)
			return nil, err
		}
		if lease != a.lease {
			a.lease, a.unknown = lease, nil // the old lease takes its keys with it
		}
		sent := time.Now()
		val := c.encode(sent, r)
		g, maybe, err := r.kind.try(ctx, a, val)
		if err != nil {
			for _, k := range maybe { // it may have landed, or ctx ended on a Txn that did
				a.unknown = append(a.unknown, tried{k, string(val)})
			}
			if err := c.retryAcquire(ctx, err, r, lease); err != nil {
				c.forget(a.unknown)
				return nil, err
			}
			continue
		}
		if g == nil {
			var done bool
			if g, done, err = r.kind.blocked(ctx, a); done {
				c.forget(a.unknown)
				return nil, err
			}
		}
		if g == nil {
			continue
		}
		g.sent = cmp.Or(g.sent, sent)
		l, err := c.register(c.newLock(r, g, lease), g.sent)
		if r.wait && errors.Is(err, ErrSessionLost) {
			continue
		}
		return l, err
	}
}

// forget queues deletes of the keys attempts with an unknown outcome may have
// put, so that a lock nobody will use does not stay held for the session's
// life; each delete is conditioned on the exact value the attempt wrote.
func (c *Client) forget(ts []tried) {
	for _, t := range ts {
		c.sess.addPending(pendingDelete{key: t.key, cmp: clientv3.Compare(clientv3.Value(t.key), "=", t.val)})
	}
}

// register records a granted lock under each of its names. If the session
// ended meanwhile, the keys go with it and the session's error is returned;
// after Close they are deleted.
func (c *Client) register(l *Lock, sent time.Time) (*Lock, error) {
	var spawn func()
	if l.watch {
		spawn = func() {
			c.loops.Add(1)
			go c.followKey(l)
		}
	}
	olds, first, earliest, err := c.reg.add(l, sent, spawn)
	if err != nil {
		l.cancel(err)
		if err == ErrSessionLost {
			return nil, fmt.Errorf("%w: lost while acquiring %s", ErrSessionLost, label(l.names, l.set))
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.deleteKeys(ctx, l.names, l.keys, l.token, l.set)
		return nil, ErrClosed
	}
	if earliest {
		c.sess.arm(l.lease)
	}
	c.armMaxHold(l, sent)
	for _, old := range olds {
		old.lose(nil)
	}
	if first {
		c.sess.wake() // the busy cadence may want a renewal now
	}
	return l, nil
}

// retryAcquire decides what a failed attempt means: nil to try again (at once
// under a new session, or after a pause for a transient error while waiting),
// or the error to return. A lease etcd no longer has ends the session at once.
func (c *Client) retryAcquire(ctx context.Context, err error, r *request, lease clientv3.LeaseID) error {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		c.loseLease(lease, "etcd no longer has the session lease")
		if r.wait {
			return nil
		}
		return fmt.Errorf("%w: lease not found while acquiring %s", ErrSessionLost, label(r.names, r.set))
	case transient(ctx, err) && r.wait:
		return c.sleep(ctx, retryDelay)
	}
	return fmt.Errorf("lockclient: acquire %s: %w", label(r.names, r.set), c.explain(ctx, err))
}
