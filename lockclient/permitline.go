package lockclient

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A semaphore's waiters queue in its own line, places under its slots' prefix
// (semLine: no slot name sorts there, and no lock name has a slash); the
// oldest waiter takes the first free slot.
func semLine(slots string) string { return slots + "\x00" }

// semState is a semaphore as read: its slots below n by index, its line of
// waiters in order, a slot an earlier attempt of the call took (its answer
// lost), and keys of this Client's lost sessions.
type semState struct {
	taken   []*mvccpb.KeyValue
	line    []*mvccpb.KeyValue
	ours    *mvccpb.KeyValue
	orphans []*mvccpb.KeyValue
}

func (p *permitKind) split(a *attempt, kvs []*mvccpb.KeyValue) semState {
	c := a.c
	s := semState{taken: make([]*mvccpb.KeyValue, p.n)}
	for _, kv := range kvs {
		i, ok := slotIndex(c.nameOf(kv), p.name)
		place := !ok && strings.HasPrefix(string(kv.Key), semLine(p.slots))
		switch {
		case !ok && !place, ok && i >= p.n:
			continue // a slot of a caller with a larger n: not ours to count
		case a.orphan(kv):
			s.orphans = append(s.orphans, kv)
		case ok && a.ours(kv):
			s.ours = kv
		}
		if place {
			s.line = append(s.line, kv)
		} else {
			s.taken[i] = kv
		}
	}
	slices.SortFunc(s.line, func(x, y *mvccpb.KeyValue) int { return int(x.CreateRevision - y.CreateRevision) })
	return s
}

// waitTurn waits in the semaphore's line at me: behind another waiter for
// its delete, at the head for a free slot below n, which it takes with its
// place's delete in one Txn. Not done, without a grant, when me is gone.
func (p *permitKind) waitTurn(ctx context.Context, a *attempt, me *mvccpb.KeyValue, kvs []*mvccpb.KeyValue, rev int64) (*granted, bool, error) {
	c := a.c
	for {
		s := p.split(a, kvs)
		if s.ours != nil {
			return a.found([]string{c.nameOf(s.ours)}, []string{string(s.ours.Key)}, s.ours), false, nil
		}
		if len(s.orphans) > 0 && c.dropOrphans(ctx, s.orphans) == nil {
			s.line = slices.DeleteFunc(s.line, func(kv *mvccpb.KeyValue) bool { return slices.Contains(s.orphans, kv) })
		}
		at := slices.IndexFunc(s.line, func(kv *mvccpb.KeyValue) bool { return bytes.Equal(kv.Key, me.Key) })
		var err error
		switch free := slices.Index(s.taken, nil); {
		case at < 0:
			return nil, false, nil
		case at > 0:
			c.waiting(ctx, p.name, s.line[at-1])
			err = c.waitDeleted(ctx, string(s.line[at-1].Key), rev)
		case free < 0:
			c.waiting(ctx, p.name, s.taken[0])
			err = c.waitSlotFreed(ctx, p, rev)
		default:
			var g *granted
			if g, kvs, rev, err = p.take(ctx, a, me, free); g != nil || err != nil {
				return g, err != nil, err
			}
			continue
		}
		if err == nil {
			kvs, rev, err = c.readRange(ctx, p.slots, clientv3.GetPrefixRangeEnd(p.slots))
		}
		if err != nil {
			return nil, true, err
		}
	}
}

// take puts slot i in the head waiter me's stead, in one Txn with its place's
// delete; when refused, what it read. A transient error reads again: the
// slot's value tells whether the Txn landed.
func (p *permitKind) take(ctx context.Context, a *attempt, me *mvccpb.KeyValue, i int) (*granted, []*mvccpb.KeyValue, int64, error) {
	c := a.c
	key, sent := c.key(slotName(p.name, i)), time.Now()
	puts := []clientv3.Op{clientv3.OpPut(key, string(me.Value), clientv3.WithLease(a.lease)), clientv3.OpDelete(string(me.Key))}
	mark := c.sess.marks(a.lease)
	if mark {
		puts = append(puts, clientv3.OpPut(sessionKey(c.prefix, int64(a.lease)), "", clientv3.WithLease(a.lease)))
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(me.Key)), "=", me.CreateRevision),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(puts...).Else(clientv3.OpGet(p.slots, clientv3.WithPrefix())).Commit()
	})
	switch {
	case err != nil && transient(ctx, err):
		a.unknown = append(a.unknown, tried{key, string(me.Value)})
		kvs, rev, err := c.readRange(ctx, p.slots, clientv3.GetPrefixRangeEnd(p.slots))
		return nil, kvs, rev, err
	case err != nil:
		return nil, nil, 0, err
	case resp.Succeeded:
		if mark {
			c.sess.markStored(a.lease)
		}
		return &granted{names: []string{slotName(p.name, i)}, keys: []string{key}, token: fence.Token(resp.Header.Revision), sent: sent}, nil, 0, nil
	}
	return nil, resp.Responses[0].GetResponseRange().GetKvs(), resp.Header.Revision, nil
}

// pickFree returns the slot the next attempt tries: the first free one, or -1.
// After a second refusal (callers racing for the same first free slot, all
// read the same slots) it is a random free one, so racers spread out.
func (p *permitKind) pickFree(taken []*mvccpb.KeyValue) int {
	p.reads++
	var free []int
	for i, kv := range taken {
		if kv == nil {
			free = append(free, i)
		}
	}
	switch {
	case len(free) == 0:
		return -1
	case p.reads < 2:
		return free[0]
	}
	return free[rand.N(len(free))]
}

// waitSlotFreed waits until a slot of p below n is deleted after rev; a
// compacted history ends the wait, and the next Txn tells what is true.
func (c *Client) waitSlotFreed(ctx context.Context, p *permitKind, rev int64) error {
	return c.wait(ctx, watchSpec{
		key: p.slots, prefix: true, deletes: true, rev: rev + 1,
		event: func(ev *clientv3.Event) bool {
			i, ok := slotIndex(c.nameOf(ev.Kv), p.name)
			return ev.Type == mvccpb.DELETE && ok && i < p.n
		},
		reread: func(context.Context) (int64, bool, error) { return 0, true, nil },
	})
}
