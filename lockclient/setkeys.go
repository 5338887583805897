package lockclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
		if n := nameOf(c, kv); checkName(n) == nil {
			names = append(names, n)
		}
	}
	return names, nil
}

// retrySet decides what a failed set Txn means: try again after a pause, or
// give up with the error to return.
func (c *Client) retrySet(ctx context.Context, err error, wait bool, names []string) (bool, error) {
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// The Client's renewal finds the session gone within its interval; the
		// next attempt then runs under what session() says.
		if !wait {
			return false, fmt.Errorf("%w: lease not found while acquiring %s", ErrSessionLost, setLabel(names))
		}
	case transient(ctx, err) && wait:
	default:
		return false, fmt.Errorf("lockclient: acquire %s: %w", setLabel(names), c.denied(err))
	}
	if err := c.sleep(ctx, retryDelay); err != nil {
		return false, err
	}
	return true, nil
}

// setTxn is a set's acquire Txn: create every key if none exists, else read them.
type setTxn struct {
	keys       []string
	cmps       []clientv3.Cmp
	gets, puts []clientv3.Op
}

func (c *Client) newSetTxn(names []string) *setTxn {
	t := &setTxn{
		keys: make([]string, len(names)),
		cmps: make([]clientv3.Cmp, len(names)),
		gets: make([]clientv3.Op, len(names)),
		puts: make([]clientv3.Op, len(names)),
	}
	for i, n := range names {
		t.keys[i] = c.key(n)
		t.cmps[i] = clientv3.Compare(clientv3.CreateRevision(t.keys[i]), "=", 0)
		t.gets[i] = clientv3.OpGet(t.keys[i])
	}
	return t
}

// commit sends one attempt: every key put with val under lease.
func (t *setTxn) commit(ctx context.Context, c *Client, lease clientv3.LeaseID, val []byte) (*clientv3.TxnResponse, error) {
	for i, k := range t.keys {
		t.puts[i] = clientv3.OpPut(k, string(val), clientv3.WithLease(lease))
	}
	return c.cli.Txn(ctx).If(t.cmps...).Then(t.puts...).Else(t.gets...).Commit()
}

func (c *Client) newSetLock(names []string, token fence.Token, lease clientv3.LeaseID, lo lockOptions) *Lock {
	l := newLock(c, names[0], token, lease, lo)
	l.names = names
	return l
}

// waitSet waits until every key that blocked an attempt at revision rev has
// been deleted since (or a watch broke, which the next attempt answers). It
// writes nothing.
func (c *Client) waitSet(ctx context.Context, held []*mvccpb.KeyValue, rev int64) error {
	c.waiting(ctx, nameOf(c, held[0]), held[0])
	for _, kv := range held {
		if err := c.waitDelete(ctx, string(kv.Key), rev); err != nil {
			return err
		}
	}
	return nil
}

// blockers sorts the keys a failed set Txn found into those held by others and
// those an earlier attempt of this call created (this session's lease, one of
// the unknown values).
func blockers(resp *clientv3.TxnResponse, lease clientv3.LeaseID, unknown [][]byte) (held, ours []*mvccpb.KeyValue) {
	for _, r := range resp.Responses {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			continue
		}
		if clientv3.LeaseID(kvs[0].Lease) == lease && isOneOf(kvs[0].Value, unknown) {
			ours = append(ours, kvs[0])
		} else {
			held = append(held, kvs[0])
		}
	}
	return held, ours
}

func nameOf(c *Client, kv *mvccpb.KeyValue) string { return string(kv.Key[len(c.prefix):]) }

// forgetSet queues deletes of every key an attempt with an unknown outcome may
// have created, each conditioned on the exact value that attempt wrote.
func (c *Client) forgetSet(keys []string, vals [][]byte) {
	for _, k := range keys {
		c.forget(k, vals)
	}
}

// encodeSet is encode for one attempt on a set of n names: holderValue with
// set_size, which tells Holder to look up the set's other names.
func (c *Client) encodeSet(at time.Time, n int) []byte {
	b := c.encode(at)
	b = append(b[:len(b)-1], `,"set_size":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '}')
}
