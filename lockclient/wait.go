package lockclient

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchSpec is what one wait follows: a key (or a key prefix) from a revision.
type watchSpec struct {
	key     string
	prefix  bool
	end     string // if set, the range's end: key up to end
	prevKV  bool   // events carry the key as it was before
	deletes bool   // only DELETE events
	rev     int64  // the first revision to watch; 0: reread first
	// event handles one event; true ends the wait.
	event func(ev *clientv3.Event) (done bool)
	// flush, if set, follows the events of each watch response (whole
	// revisions: etcd never splits one); true ends the wait.
	flush func() (done bool)
	// reread says what is true now, when etcd compacted the revision the wait
	// would resume from (or rev is 0): done, or the revision to resume from.
	reread func(ctx context.Context) (rev int64, done bool, err error)
}

// wait is the one wait of this package: it follows s.key from s.rev, handing
// each event to s.event until that says done (nil), ctx ends or the Client
// closes; a broken watch resumes after the last event, or where s.reread says.
func (c *Client) wait(ctx context.Context, s watchSpec) error {
	rev, compacted := s.rev, s.rev == 0
	for {
		if compacted {
			next, done, err := s.reread(ctx)
			switch {
			case err == nil && done:
				return nil
			case err == nil:
				rev = next
			case c.cli.Ctx().Err() != nil:
				return c.cli.Ctx().Err() // the etcd client was closed
			default:
				if err := c.sleep(ctx, retryDelay); err != nil {
					return err
				}
				continue
			}
		}
		done, lost, err := c.watchOnce(ctx, s, &rev)
		if done || err != nil {
			return err
		}
		if err := cmp.Or(ctx.Err(), c.cli.Ctx().Err()); err != nil {
			return err // ctx ended, or the etcd client was closed
		}
		if compacted = lost; !compacted {
			if err := c.sleep(ctx, retryDelay); err != nil {
				return err
			}
		}
	}
}

// watchOnce runs one etcd watch from *rev until an event says done, the watch
// breaks (compacted says whether etcd compacted *rev away) or the Client closes.
func (c *Client) watchOnce(ctx context.Context, s watchSpec, rev *int64) (done, compacted bool, err error) {
	// WithRequireLeader: a member cut off from its cluster ends the watch
	// instead of keeping it silent; it resumes on another.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(*rev)}
	switch {
	case s.prefix:
		opts = append(opts, clientv3.WithPrefix())
	case s.end != "":
		opts = append(opts, clientv3.WithRange(s.end))
	}
	if s.prevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	if s.deletes {
		opts = append(opts, clientv3.WithFilterPut())
	}
	wch := c.cli.Watch(wctx, s.key, opts...)
	for {
		select {
		case <-c.done:
			return false, false, c.sess.err()
		case wr, ok := <-wch:
			switch {
			case !ok:
				return false, false, nil
			case wr.CompactRevision != 0:
				return false, true, nil
			case wr.Err() != nil || wr.Canceled:
				return false, false, nil
			}
			for _, ev := range wr.Events {
				if s.event(ev) {
					return true, false, nil
				}
				*rev = ev.Kv.ModRevision + 1
			}
			if s.flush != nil && s.flush() {
				return true, false, nil
			}
		}
	}
}

// waitDeleted waits until key has been deleted after revision rev. When etcd
// compacted the history, it returns: the caller's next Txn tells what is true.
func (c *Client) waitDeleted(ctx context.Context, key string, rev int64) error {
	return c.wait(ctx, watchSpec{
		key: key, deletes: true, rev: rev + 1,
		event:  func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE },
		reread: func(context.Context) (int64, bool, error) { return 0, true, nil },
	})
}

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
	resp, err := retryTransient(ctx, c, func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).Then(
			clientv3.OpGet(string(me.Key), clientv3.WithCountOnly()),
			clientv3.OpGet(key, clientv3.WithRange(lineEnd(key)), clientv3.WithMaxCreateRev(me.CreateRevision-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
		).Commit()
	})
	if err != nil {
		return false, nil, 0, err
	}
	var ahead *mvccpb.KeyValue
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		ahead = kvs[0]
	}
	return resp.Responses[0].GetResponseRange().GetCount() > 0, ahead, resp.Header.Revision, nil
}

// readRange reads the keys from key up to end, retrying transient errors
// until ctx ends.
func (c *Client) readRange(ctx context.Context, key, end string) ([]*mvccpb.KeyValue, int64, error) {
	resp, err := retryTransient(ctx, c, func() (*clientv3.GetResponse, error) {
		return c.cli.Get(ctx, key, clientv3.WithRange(end))
	})
	if err != nil {
		return nil, 0, err
	}
	return resp.Kvs, resp.Header.Revision, nil
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
