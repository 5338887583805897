package lockclient

import (
	"bytes"
	"context"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// namesKind is the kind of Acquire and AcquireSet: every key of the call's
// names created under the session lease in one Txn, or none.
type namesKind struct {
	keys []string
	resp *clientv3.TxnResponse // the last refusal: every key, as read
}

func (k *namesKind) try(ctx context.Context, a *attempt, val []byte) (*granted, []string, error) {
	resp, err := a.c.txnCreate(ctx, k.keys, a.lease, val)
	switch {
	case err != nil:
		return nil, k.keys, err
	case resp.Succeeded:
		return &granted{names: a.r.names, token: fence.Token(resp.Header.Revision)}, nil, nil
	}
	k.resp = resp
	return nil, nil, nil
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
	mark := c.storesSessionKey(lease) && len(keys) < MaxSetSize // a Txn takes at most MaxSetSize operations
	if mark {
		puts = append(puts, clientv3.OpPut(sessionKey(c.prefix, int64(lease)), "", clientv3.WithLease(lease)))
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
	})
	if mark && err == nil && resp.Succeeded {
		c.sessionKeyStored(lease)
	}
	return resp, err
}

// storesSessionKey reports whether a grant under lease is to store the
// session key with it: the session's first grant does.
func (c *Client) storesSessionKey(lease clientv3.LeaseID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.marked != lease
}

// sessionKeyStored records that etcd stored lease's session key.
func (c *Client) sessionKeyStored(lease clientv3.LeaseID) {
	c.mu.Lock()
	if c.lease == lease {
		c.marked = lease
	}
	c.mu.Unlock()
}

// blocked handles an attempt that found keys. It is done when an earlier
// attempt of this call had taken every key, for a try (a *HeldError), or when
// the wait fails; otherwise the keys that blocked it were deleted and the
// caller tries again.
func (k *namesKind) blocked(ctx context.Context, a *attempt) (*granted, bool, error) {
	c, r := a.c, a.r
	var held, ours, orphans []*mvccpb.KeyValue
	for _, rr := range k.resp.Responses {
		kvs := rr.GetResponseRange().GetKvs()
		switch {
		case len(kvs) == 0:
		case isMark(kvs[0].Value): // checked by the Txn: the key etcd compared
			return nil, true, semaphoreErr("Acquire", c.nameOf(kvs[0]))
		case clientv3.LeaseID(kvs[0].Lease) != a.lease && bytes.HasPrefix(kvs[0].Value, c.valuePrefix):
			orphans = append(orphans, kvs[0])
		case a.ours(kvs[0]):
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
		return a.found(r.names, ours[0]), false, nil // an earlier attempt took every key
	}
	if len(ours) > 0 {
		// Part of an earlier attempt's keys is left (someone deleted the rest):
		// give it up, and wait for those keys like any other.
		c.forget(a.unknown)
		a.unknown = nil
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
		if err := c.waitDeleted(ctx, string(kv.Key), k.resp.Header.Revision); err != nil {
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
