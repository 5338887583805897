package lockclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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
	if !c.reg.remove(l) {
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

// pendDeletes queues a delete of each of keys, conditioned on token.
func (c *Client) pendDeletes(keys []string, token fence.Token) {
	dels := make([]pendingDelete, len(keys))
	for i, key := range keys {
		dels[i] = tokenDelete(key, token)
	}
	c.sess.addPending(dels...)
}

// dropSet finishes the loss of a set: its names still registered to it are
// unregistered, and its keys that still carry its token are deleted in the
// background, so that its other names do not stay held for the session's life.
func (c *Client) dropSet(l *Lock) {
	c.reg.drop(l)
	c.pendDeletes(l.keys, l.token)
}
