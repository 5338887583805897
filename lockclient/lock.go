package lockclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Lock is a granted lock on one name or on a set of names, under one fencing
// token. It satisfies fence.Set, fence.Watched and fence.Leased: hand it to
// fence.Exec or an adapter. A plain Lock does not watch its key: when someone
// else deletes it (fencectl release), it learns so at its next Renew or
// Release or when its session ends; until then the database refuses its
// writes. A term of Lead watches its key.
type Lock struct {
	c       *Client
	name    string   // its first name
	names   []string // its names, sorted; one for Acquire
	keys    []string // its etcd keys, by name: the lock key, or its place in the line
	set     bool     // taken by AcquireSet
	token   fence.Token
	lease   clientv3.LeaseID
	manual  bool
	watch   bool          // watches its key (a term of Lead)
	dur     time.Duration // lease duration of a manual-renewal lock
	maxHold time.Duration // WithMaxHold; 0: none
	ctx     context.Context
	cancel  context.CancelCauseFunc
	granted time.Time   // when the grant was registered, for hold times
	ended   atomic.Bool // set by the first end, which alone is reported

	// guarded by the registry's lock
	deadline time.Time // manual renewal: last renewal send time + dur
	index    int       // position in the manual heap, -1 when not there
}

var (
	_ fence.Set     = (*Lock)(nil)
	_ fence.Watched = (*Lock)(nil)
	_ fence.Leased  = (*Lock)(nil)
)

var (
	closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()
	nilLockCtx = func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errNilLock)
		return ctx
	}()
)

func (c *Client) newLock(r *request, g *granted, lease clientv3.LeaseID) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{c: c, name: g.names[0], names: g.names, keys: g.keys, set: r.set, token: g.token, lease: lease,
		manual: r.lo.manual, watch: r.lo.watch, dur: r.lo.lease, maxHold: r.lo.maxHold, ctx: ctx, cancel: cancel, index: -1}
	if c.obs != nil || c.log != nil {
		l.granted = time.Now()
	}
	return l
}

// Resource returns the lock's name, for a set its first in sorted order; "" for
// a nil Lock, which fence.CheckGrant refuses.
func (l *Lock) Resource() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Resources returns the lock's names, sorted, in a new slice; nil for a nil Lock.
func (l *Lock) Resources() []string {
	if l == nil {
		return nil
	}
	return slices.Clone(l.names)
}

// Token returns the lock's fencing token, its keys' create revision; 0 for a nil Lock.
func (l *Lock) Token() fence.Token {
	if l == nil {
		return 0
	}
	return l.token
}

// Lease returns how long the lock outlives its holder's silence (the lease of
// WithManualRenewal, else the session TTL, or the longer one etcd granted);
// 0 for a nil Lock.
func (l *Lock) Lease() time.Duration {
	if l == nil {
		return 0
	}
	if l.manual {
		return l.dur
	}
	return max(l.c.ttl, l.c.sess.grantedTTL())
}

// Done is closed when the lock ends: the protected work must stop; fenced
// writes are refused from then on. It is closed for a nil Lock. Once the
// lock's deadline has passed, the channel Done returns is closed already,
// even in a process that has just woken from a pause, before the clock's
// own timer has run.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return closedChan
	}
	l.c.expireDue(l)
	return l.ctx.Done()
}

// Context is cancelled when the lock ends, with the end's cause (see the
// package doc); derive the protected work's contexts from it. For a nil Lock
// it is cancelled with a cause matching ErrNotHeld. As with Done, once the
// lock's deadline has passed the context Context returns is cancelled
// already: a job that checks l.Context().Err() after a pause sees the loss.
func (l *Lock) Context() context.Context {
	if l == nil {
		return nilLockCtx
	}
	l.c.expireDue(l)
	return l.ctx
}

// lose ends the lock as lost: with why (ErrNotRenewed), or, when why is nil,
// because its key was deleted or replaced.
func (l *Lock) lose(why error) {
	cause := grant.Lost(l.name, l.token)
	if why != nil {
		cause = fmt.Errorf("%w: %w", cause, why)
	}
	l.end(cause)
	if len(l.names) > 1 {
		l.c.dropSet(l) // the members whose keys are still ours go too
	}
}

// end ends the lock with cause; only the first end counts.
func (l *Lock) end(cause error) {
	if !l.ended.CompareAndSwap(false, true) {
		return
	}
	// The observer first (cheap by contract), so a metric counts the end by
	// the time Done closes; the log after, so a slow handler never delays
	// telling the holder.
	var held time.Duration
	if c := l.c; c.obs != nil || c.log != nil {
		held = time.Since(l.granted)
		if c.obs != nil {
			c.obs.Ended(l.name, l.token, held, cause)
		}
	}
	l.cancel(cause)
	l.c.logEnd(l, cause, held)
}

// Renew confirms with etcd (one linearizable read) that every key of the lock
// still carries its token; for a WithManualRenewal lock it also restarts the
// lease from the moment the call was sent. ctx governs the read.
//
// Errors: fence.ErrLost when the lock is lost (it ends so); a *NotHeldError
// after Release or for a nil Lock; ErrClosed; etcd's error (the lock is as it was).
func (l *Lock) Renew(ctx context.Context) (err error) {
	if l == nil {
		return errNilLock
	}
	if l.ctx.Err() != nil {
		return l.endedErr()
	}
	c := l.c
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	sent := time.Now()
	held, err := c.carries(ctx, l)
	if err != nil {
		return fmt.Errorf("lockclient: renew %q: %w", l.name, c.explain(ctx, err))
	}
	if !held {
		if c.reg.get(l.name) == l {
			c.keyGone(ctx, l)
		}
		return l.endedErr()
	}
	if !c.reg.renewed(l, sent) {
		return l.endedErr()
	}
	return nil
}

// Release ends the lock (cause ErrReleased) and deletes its keys in one Txn
// conditioned on its token, so never a successor's key. ctx governs the Txn; if
// it cannot reach etcd, the Client retries the delete in the background.
//
// Errors: a *NotHeldError when a key no longer carries the token (its other keys
// are deleted in the background), after Release or for a nil Lock; fence.ErrLost
// when it was lost before; ErrClosed; etcd's error.
func (l *Lock) Release(ctx context.Context) (err error) {
	if l == nil {
		return errNilLock
	}
	c := l.c
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	if !c.reg.remove(l) {
		return l.endedErr() // ended, or being ended by whoever unregistered it
	}
	l.end(ErrReleased)
	return c.releaseKeys(ctx, l)
}

// releaseKeys is l's release Txn; if it fails other than with a
// *NotHeldError, the deletes are retried in the background.
func (c *Client) releaseKeys(ctx context.Context, l *Lock) error {
	err := c.deleteKeys(ctx, l.names, l.keys, l.token, l.set)
	var nh *NotHeldError
	if err != nil && !errors.As(err, &nh) {
		c.pendDeletes(l.keys, l.token)
	}
	return err
}

// carries reads every key of l in one linearizable read and reports whether
// each still carries l's token under l's session lease.
func (c *Client) carries(ctx context.Context, l *Lock) (bool, error) {
	ops := make([]clientv3.Op, len(l.keys))
	for i, key := range l.keys {
		ops[i] = clientv3.OpGet(key) // not keys-only: etcd then omits the lease
	}
	resp, err := retryOverload(ctx, c, "renew", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).Then(ops...).Commit()
	})
	if err != nil {
		return false, err
	}
	for _, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 0 || fence.Token(kvs[0].CreateRevision) != l.token || clientv3.LeaseID(kvs[0].Lease) != l.lease {
			return false, nil
		}
	}
	return true, nil
}

// Release releases the lock (or permit slot) name if its key still carries
// token, for callers that kept only the token: one Txn on its create revision.
//
// Errors: a *NotHeldError when the key is gone or carries another token;
// fence.ErrInvalidArgument for a bad name or a token <= 0; ErrClosed; etcd's.
func (c *Client) Release(ctx context.Context, name string, token fence.Token) (err error) {
	if err := checkLockName(name); err != nil {
		return err
	}
	if token <= 0 {
		return fmt.Errorf("fence: invalid token %d for %q: tokens are > 0: %w", token, name, fence.ErrInvalidArgument)
	}
	if c.sess.isClosed() {
		return ErrClosed
	}
	l := c.reg.get(name)
	if l != nil && l.token == token {
		return l.Release(ctx)
	}
	ctx, end := c.call(ctx) // Close ends the call
	defer end(&err)
	key, err := c.keyOf(ctx, name, token)
	if err != nil {
		return err
	}
	return c.deleteKeys(ctx, []string{name}, []string{key}, token, false)
}

// keyOf finds the key of name's line that token holds or waits on: the lock
// key, or a place in its line; a *NotHeldError names the holder when none.
func (c *Client) keyOf(ctx context.Context, name string, token fence.Token) (string, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	key := c.key(name)
	resp, err := c.cli.Get(ctx, key, clientv3.WithRange(lineEnd(key)), clientv3.WithKeysOnly())
	if err != nil {
		return "", fmt.Errorf("lockclient: release %q (token %d): %w", name, token, c.explain(ctx, err))
	}
	nh := &NotHeldError{Name: name, Token: token}
	for _, kv := range resp.Kvs {
		switch {
		case fence.Token(kv.CreateRevision) == token:
			return string(kv.Key), nil
		case nh.Current == 0 || fence.Token(kv.CreateRevision) < nh.Current:
			nh.Current = fence.Token(kv.CreateRevision)
		}
	}
	return "", nh
}

// deleteKeys is the release Txn: delete every key of names only if every one
// carries token. If some key does not, the keys that still do are deleted in
// the background, and a *NotHeldError names the first key that does not.
func (c *Client) deleteKeys(ctx context.Context, names, keys []string, token fence.Token, set bool) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	cmps := make([]clientv3.Cmp, len(keys))
	dels := make([]clientv3.Op, len(keys))
	gets := make([]clientv3.Op, len(keys))
	for i, key := range keys {
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))
		dels[i] = clientv3.OpDelete(key)
		gets[i] = clientv3.OpGet(key, clientv3.WithKeysOnly())
	}
	resp, err := retryOverload(ctx, c, "release", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(cmps...).Then(dels...).Else(gets...).Commit()
	})
	if err != nil {
		return fmt.Errorf("lockclient: release %s (token %d): %w", label(names, set), token, c.explain(ctx, err))
	}
	if resp.Succeeded {
		return nil
	}
	var carrying []string
	var nh *NotHeldError
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		switch {
		case len(kvs) == 1 && fence.Token(kvs[0].CreateRevision) == token:
			carrying = append(carrying, keys[i])
		case nh == nil:
			nh = &NotHeldError{Name: names[i], Token: token}
			if len(kvs) == 1 {
				nh.Current = fence.Token(kvs[0].CreateRevision)
			}
		}
	}
	c.pendDeletes(carrying, token)
	if nh == nil {
		return &NotHeldError{Name: names[0], Token: token} // cannot happen: the compare failed
	}
	return nh
}
