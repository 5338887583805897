package lockclient

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A name's line is its lock key and every key from it up to lineEnd: its
// holder's and its waiters' places (key + "\x00" + a place of its own; no lock
// name holds a control character). The key with the lowest create revision
// holds the lock; its create revision is the token.
func lineEnd(key string) string { return key + "\x01" }

// placeKey is a place in key's line, unique to the session and attempt.
func (c *Client) placeKey(key string, lease clientv3.LeaseID) string {
	return key + "\x00" + strconv.FormatInt(int64(lease), 16) + "." + strconv.FormatUint(c.seq.Add(1), 16)
}

// lineTail reads the end of key's line as the attempt that queues sees it: its
// own place and the one just ahead, which is all waitTurn needs, so a place
// costs the same whatever the line's length. The whole line when an earlier
// attempt of the call may have put a place too (pickPlace looks for it).
func lineTail(key string, whole bool) clientv3.Op {
	if whole {
		return clientv3.OpGet(key, clientv3.WithRange(lineEnd(key)))
	}
	return clientv3.OpGet(key, clientv3.WithRange(lineEnd(key)),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))
}

// head returns the key of line that holds the lock: the lowest create revision.
func head(line []*mvccpb.KeyValue) *mvccpb.KeyValue {
	return slices.MinFunc(line, func(x, y *mvccpb.KeyValue) int { return int(x.CreateRevision - y.CreateRevision) })
}

// orphan reports whether kv is a key this Client put under a session it has
// lost: its Locks have all ended, so it is deleted rather than waited out.
func (a *attempt) orphan(kv *mvccpb.KeyValue) bool {
	return clientv3.LeaseID(kv.Lease) != a.lease && bytes.HasPrefix(kv.Value, a.c.valuePrefix)
}

// pickPlace keeps the call's best place in line: me, or a key an earlier
// attempt of it put (its answer lost) if that one is ahead. Keys of this
// Client's lost sessions are deleted rather than waited out.
func (k *namesKind) pickPlace(ctx context.Context, a *attempt, line []*mvccpb.KeyValue, me *mvccpb.KeyValue) *mvccpb.KeyValue {
	best := me
	var orphans []*mvccpb.KeyValue
	for _, kv := range line {
		switch {
		case string(kv.Key) == k.place:
		case a.orphan(kv):
			orphans = append(orphans, kv)
		case a.ours(kv) && kv.CreateRevision < best.CreateRevision:
			best = kv
		}
	}
	if len(orphans) > 0 {
		a.c.dropOrphans(ctx, orphans) // if it fails, they are waited out like any other
	}
	if best != me {
		a.keep(best) // forgets the call's other places, me included
	}
	return best
}

// waitTurn waits in line at me until every key ahead of it is gone: then me
// holds the lock, its create revision the token. It watches only the key just
// ahead (a delete wakes one waiter, as etcd's Mutex does) and after each
// delete reads again whether me is in line and which key is now just ahead.
// Done with an error when the wait fails; not done, without a grant, when me
// was deleted (the caller queues again).
func (k *namesKind) waitTurn(ctx context.Context, a *attempt, me *mvccpb.KeyValue, line []*mvccpb.KeyValue, rev int64) (*granted, bool, error) {
	c := a.c
	var read time.Time // when the read that found me first was sent
	in := slices.ContainsFunc(line, func(kv *mvccpb.KeyValue) bool { return bytes.Equal(kv.Key, me.Key) })
	ahead := justAhead(line, me)
	for {
		switch {
		case !in:
			return nil, false, nil
		case ahead == nil:
			return &granted{names: a.r.names, keys: []string{string(me.Key)}, token: fence.Token(me.CreateRevision), sent: read}, false, nil
		case a.orphan(ahead) && c.dropOrphans(ctx, []*mvccpb.KeyValue{ahead}) == nil:
		default:
			c.waiting(ctx, a.r.names[0], ahead)
			if err := c.waitDeleted(ctx, string(ahead.Key), rev); err != nil {
				return nil, true, err
			}
		}
		read = time.Now()
		var err error
		if in, ahead, rev, err = c.readAhead(ctx, k.keys[0], me); err != nil {
			return nil, true, err
		}
	}
}

// justAhead returns the key of line created last before me, or nil.
func justAhead(line []*mvccpb.KeyValue, me *mvccpb.KeyValue) *mvccpb.KeyValue {
	var ahead *mvccpb.KeyValue
	for _, kv := range line {
		if kv.CreateRevision < me.CreateRevision && (ahead == nil || kv.CreateRevision > ahead.CreateRevision) {
			ahead = kv
		}
	}
	return ahead
}

// readAhead reads, in one request, whether me is still in key's line and the
// key just ahead of it (nil: me holds the lock), retrying transient errors
// until ctx ends. Two keys, not the line: a handoff's read costs the same
// whatever the number of waiters.
func (c *Client) readAhead(ctx context.Context, key string, me *mvccpb.KeyValue) (bool, *mvccpb.KeyValue, int64, error) {
	for {
		resp, err := c.cli.Txn(ctx).Then(
			clientv3.OpGet(string(me.Key), clientv3.WithCountOnly()),
			clientv3.OpGet(key, clientv3.WithRange(lineEnd(key)), clientv3.WithMaxCreateRev(me.CreateRevision-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
		).Commit()
		if err == nil {
			var ahead *mvccpb.KeyValue
			if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
				ahead = kvs[0]
			}
			return resp.Responses[0].GetResponseRange().GetCount() > 0, ahead, resp.Header.Revision, nil
		}
		if !transient(ctx, err) {
			return false, nil, 0, err
		}
		if err := c.sleep(ctx, retryDelay); err != nil {
			return false, nil, 0, err
		}
	}
}
