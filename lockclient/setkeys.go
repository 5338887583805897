package lockclient

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This file holds what single locks and sets share: the registry under every
// name, and the etcd calls that read or delete all of a lock's keys.

// keyNames returns the names l holds: a set's, or its one name.
func (l *Lock) keyNames() []string {
	if l.names != nil {
		return l.names
	}
	return []string{l.name}
}

// replaceLocked registers l under each of its names and unregisters the locks
// of ours registered there before; it returns those, which are lost: etcd just
// created l's keys, so their keys were gone.
func (c *Client) replaceLocked(l *Lock) []*Lock {
	var olds []*Lock
	for _, n := range l.keyNames() {
		if old := c.locks[n]; old != nil && old != l {
			c.unregisterLocked(old)
			olds = append(olds, old)
		}
		c.locks[n] = l
	}
	return olds
}

// dropSet finishes the loss of a set: its names still registered to it are
// unregistered, and every key of it that still carries its token is deleted in
// the background, so that its other names do not stay held for the session's life.
// With the session lost or the Client closed, there is nothing left to do.
func (c *Client) dropSet(l *Lock) {
	c.mu.Lock()
	for _, n := range l.names {
		if c.locks[n] == l {
			delete(c.locks, n)
		}
	}
	if i := l.index; i >= 0 && i < len(c.manual) && c.manual[i] == l {
		c.manual.remove(l) // a session loss or Close emptied the heap without this
	}
	c.mu.Unlock()
	c.pendDeletes(l)
}

// pendDeletes queues a delete of each of l's keys, conditioned on l's token.
func (c *Client) pendDeletes(l *Lock) {
	for _, n := range l.keyNames() {
		key := c.key(n)
		c.addPending(pendingDelete{key: key, cmp: clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))})
	}
}

// deleteLock is the release Txn of l: for a set, one Txn that deletes every
// key only if every key carries l's token. If some key does not (it was deleted
// or taken over by another holder), the keys that still carry the token are
// deleted in the background, each conditioned on it, and a *NotHeldError names
// the first key that does not.
func (c *Client) deleteLock(ctx context.Context, l *Lock) error {
	if l.names == nil {
		return c.deleteKey(ctx, l.name, l.token)
	}
	cmps := make([]clientv3.Cmp, len(l.names))
	dels := make([]clientv3.Op, len(l.names))
	gets := make([]clientv3.Op, len(l.names))
	for i, n := range l.names {
		key := c.key(n)
		cmps[i] = clientv3.Compare(clientv3.CreateRevision(key), "=", int64(l.token))
		dels[i] = clientv3.OpDelete(key)
		gets[i] = clientv3.OpGet(key, clientv3.WithKeysOnly())
	}
	resp, err := c.cli.Txn(ctx).If(cmps...).Then(dels...).Else(gets...).Commit()
	if err != nil {
		return fmt.Errorf("lockclient: release %s (token %d): %w", setLabel(l.names), l.token, c.denied(err))
	}
	if resp.Succeeded {
		return nil
	}
	c.pendDeletes(l)
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 1 && fence.Token(kvs[0].CreateRevision) == l.token {
			continue
		}
		e := &NotHeldError{Name: l.names[i], Token: l.token}
		if len(kvs) == 1 {
			e.Current = fence.Token(kvs[0].CreateRevision)
		}
		return e
	}
	return nil // cannot happen: the compare failed, so some key differed
}

// setLabel names a set in errors: its first names and its size.
func setLabel(names []string) string {
	if len(names) <= 3 {
		return fmt.Sprintf("set %q", names)
	}
	return fmt.Sprintf("set %q... of %d names", names[:3], len(names))
}

// carries reads every key of l in one linearizable read and reports whether
// each still carries l's token under l's session lease.
func (c *Client) carries(ctx context.Context, l *Lock) (bool, error) {
	names := l.keyNames()
	ops := make([]clientv3.Op, len(names))
	for i, n := range names {
		ops[i] = clientv3.OpGet(c.key(n)) // not keys-only: etcd then omits the lease
	}
	var ranges []*clientv3.GetResponse
	if len(ops) == 1 {
		resp, err := c.cli.Get(ctx, c.key(names[0]))
		if err != nil {
			return false, err
		}
		ranges = append(ranges, resp)
	} else {
		resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return false, err
		}
		for _, r := range resp.Responses {
			ranges = append(ranges, (*clientv3.GetResponse)(r.GetResponseRange()))
		}
	}
	for _, r := range ranges {
		if r == nil || len(r.Kvs) == 0 {
			return false, nil
		}
		kv := r.Kvs[0]
		if fence.Token(kv.CreateRevision) != l.token || clientv3.LeaseID(kv.Lease) != l.lease {
			return false, nil
		}
	}
	return true, nil
}

// setNames returns the names of the set whose token is tok: the keys under the
// prefix created at revision tok, which only one Txn can have created. One etcd
// read, filtered by etcd.
func (c *Client) setNames(ctx context.Context, tok fence.Token) ([]string, error) {
	resp, err := c.cli.Get(ctx, c.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinCreateRev(int64(tok)), clientv3.WithMaxCreateRev(int64(tok)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if n := nameOf(c, kv); CheckName(n) == nil {
			names = append(names, n)
		}
	}
	return names, nil
}
