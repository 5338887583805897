package lockclient

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxPermits is the largest n AcquirePermit accepts: a slot's index is four
// decimal digits, and one Txn reads every slot of a semaphore.
const maxPermits = lockname.MaxSlots

// AcquirePermit takes one of n permits of the semaphore name, waiting while n
// are held, until it is granted or ctx ends. A permit is a *Lock on a slot
// name/NNNN (the first free slot below n) with its own token, on the same
// session, lease and loss signals as Acquire's; waiters are served in order
// of arrival (the first free slot to the oldest). See
// the package doc (Semaphores) for what a permit fences and what n means.
//
// Errors: those of Acquire; fence.ErrInvalidArgument also for n < 1 or above
// 1024 (before any I/O) and when name is a lock, not a semaphore.
func (c *Client) AcquirePermit(ctx context.Context, name string, n int, opts ...LockOption) (*Lock, error) {
	return c.permitObserved(ctx, name, n, opts, true)
}

// TryAcquirePermit is AcquirePermit without the wait: when n permits are held
// it returns at once a *HeldError (ErrHeld) naming slot 0 and its holder,
// having written nothing. Its other errors are TryAcquire's.
func (c *Client) TryAcquirePermit(ctx context.Context, name string, n int, opts ...LockOption) (*Lock, error) {
	return c.permitObserved(ctx, name, n, opts, false)
}

func (c *Client) permitObserved(ctx context.Context, name string, n int, opts []LockOption, wait bool) (*Lock, error) {
	return c.observed(ctx, name, wait, func(ctx context.Context) (*Lock, error) {
		r, err := c.newPermitRequest(name, n, opts, wait)
		if err != nil {
			return nil, err
		}
		return c.acquire(ctx, r)
	})
}

// permitKind is the kind of AcquirePermit: the first free slot below n of the
// semaphore, in one Txn; the first use marks the name a semaphore.
type permitKind struct {
	name   string
	n      int
	wait   bool
	mark   string // the name's own key: the semaphore mark
	slots  string // the slots' key prefix
	slot   int    // the slot the next attempt tries first
	marked bool   // the last attempt found the mark
	reads  int    // refused attempts so far
	place  string // the last attempt's place in the semaphore's line, if it queued
	val    []byte // and the value it wrote
	out    outcome
}

func (c *Client) newPermitRequest(name string, n int, opts []LockOption, wait bool) (*request, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := fence.CheckResource(slotName(name, 0)); err != nil {
		return nil, invalid("semaphore %q: name too long for its slot names", name)
	}
	if n < 1 || n > maxPermits {
		return nil, invalid("semaphore %q: %d permits, want 1 to %d", name, n, maxPermits)
	}
	lo, err := buildLockOptions(c.ttl, opts)
	if err != nil {
		return nil, err
	}
	// Most calls find the semaphore already marked.
	p := &permitKind{name: name, n: n, wait: wait, mark: c.key(name), slots: c.key(name) + "/", marked: true}
	return &request{names: []string{name}, wait: wait, lo: lo, kind: p}, nil
}

func (p *permitKind) try(ctx context.Context, a *attempt, val []byte) (*granted, []string, error) {
	p.val = val
	out, keys, err := a.c.txnPermit(ctx, p, a.lease, val)
	switch {
	case err != nil:
		return nil, keys, err
	case out.granted:
		slot := slotName(p.name, out.slot)
		return &granted{names: []string{slot}, keys: []string{a.c.key(slot)}, token: fence.Token(out.rev)}, nil, nil
	}
	p.out = out
	return nil, nil, nil
}

// maxChain is the most slots one attempt tries, one nested Txn each: etcd
// lowers --max-txn-ops (128 by default) by each level's operations. Each
// level carries the value, so a run carries at most chainBytes of values
// (etcd's default request limit is 1.5 MiB; WithValue's largest fits once).
const (
	maxChain   = 32
	chainBytes = 64 << 10
)

// outcome is what one attempt found: the slot it took, or the mark and slots.
type outcome struct {
	granted bool
	queued  bool // the attempt wrote its place in the semaphore's line
	slot    int
	rev     int64              // the Txn's revision: the token when granted
	mark    []*mvccpb.KeyValue // refused: the name's line (its mark), as read
	slots   []*mvccpb.KeyValue // refused: every slot and waiter, as read
}

// A semaphore's waiters queue in its own line, places under its slots' prefix
// (semLine: no slot name sorts there, and no lock name has a slash); the
// oldest waiter takes the first free slot.
func semLine(slots string) string { return slots + "\x00" }

// txnPermit sends one attempt from slot p.slot and returns the keys it may
// have put. Marked, it tries up to maxChain slots in one Txn while nobody
// waits, and a waiting call queues (its place) when none is free or others
// wait; else (first use), or when the session key is to be stored with this
// grant (as txnCreate does), it tries that slot alone, putting the mark (no
// lease) or session key with it.
func (c *Client) txnPermit(ctx context.Context, p *permitKind, lease clientv3.LeaseID, val []byte) (outcome, []string, error) {
	mark := c.storesSessionKey(lease)
	from, marked := p.slot, p.marked
	to := from + 1
	if marked && !mark {
		to = min(p.n, from+max(1, min(maxChain, chainBytes/len(val))))
	}
	keys := make([]string, 0, to-from+1)
	for i := from; i < to; i++ {
		keys = append(keys, c.key(slotName(p.name, i)))
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Value(p.mark), "=", semaphoreMark),
		clientv3.Compare(clientv3.CreateRevision(semLine(p.slots)), "=", 0).WithRange(lineEnd(semLine(p.slots)))}
	var extra, queue []clientv3.Op
	if !marked {
		cmps = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(p.mark), "=", 0).WithRange(lineEnd(p.mark))}
		extra = append(extra, clientv3.OpPut(p.mark, semaphoreMark))
	}
	if mark {
		extra = append(extra, clientv3.OpPut(sessionKey(c.prefix, int64(lease)), "", clientv3.WithLease(lease)))
	}
	p.place = ""
	if marked && p.wait {
		p.place = c.placeKey(p.slots, lease) // slots + "\x00" + ...: in semLine
		queue = []clientv3.Op{clientv3.OpPut(p.place, string(val), clientv3.WithLease(lease))}
		keys = append(keys, p.place)
	}
	reads := []clientv3.Op{clientv3.OpGet(p.mark, clientv3.WithRange(lineEnd(p.mark))), clientv3.OpGet(p.slots, clientv3.WithPrefix())}
	els := reads
	if queue != nil {
		isSem := clientv3.Compare(clientv3.Value(p.mark), "=", semaphoreMark)
		els = []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{isSem}, append(queue, reads...), reads)}
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(cmps...).Then(p.chain(keys[:to-from], lease, val, extra, queue)).Else(els...).Commit()
	})
	if err != nil {
		return outcome{}, keys, err
	}
	if mark && resp.Succeeded {
		c.sessionKeyStored(lease)
	}
	return p.read(resp), nil, nil
}

// read reads an attempt's answer.
func (p *permitKind) read(resp *clientv3.TxnResponse) outcome {
	rev := resp.Header.Revision
	if !resp.Succeeded {
		rs := resp.Responses
		queued := false
		if t := rs[0].GetResponseTxn(); t != nil {
			rs, queued = t.Responses, t.Succeeded
			rs = rs[len(rs)-2:]
		}
		return outcome{queued: queued, mark: rs[0].GetResponseRange().GetKvs(), slots: rs[1].GetResponseRange().GetKvs(), rev: rev}
	}
	slot := p.slot
	for t := resp.Responses[0].GetResponseTxn(); !t.Succeeded; slot++ {
		next := t.Responses[len(t.Responses)-1]
		if t = next.GetResponseTxn(); t == nil { // every slot of the run was taken
			marks := []*mvccpb.KeyValue{{Value: []byte(semaphoreMark)}}
			return outcome{queued: p.place != "", mark: marks, slots: next.GetResponseRange().GetKvs(), rev: rev}
		}
	}
	return outcome{granted: true, slot: slot, rev: rev}
}

// chain is the nested Txn that puts the first free key of keys (with extra),
// else queues (a waiting call's place) and reads every slot.
func (p *permitKind) chain(keys []string, lease clientv3.LeaseID, val []byte, extra, queue []clientv3.Op) clientv3.Op {
	els := append(slices.Clone(queue), clientv3.OpGet(p.slots, clientv3.WithPrefix()))
	if len(keys) > 1 {
		els = []clientv3.Op{p.chain(keys[1:], lease, val, extra, queue)}
	}
	put := append([]clientv3.Op{clientv3.OpPut(keys[0], string(val), clientv3.WithLease(lease))}, extra...)
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(keys[0]), "=", 0)}, put, els)
}

// blocked reads a refused attempt: the slot and mark state for the next one,
// or done with a permit an earlier attempt of this call took (its answer
// lost), a *HeldError for a try, a lock's name, or a failed wait. A call that
// queued waits for its turn.
func (p *permitKind) blocked(ctx context.Context, a *attempt) (*granted, bool, error) {
	c := a.c
	mk := p.out.mark
	p.marked = len(mk) > 0 && isMark(mk[0].Value) // if not, the next attempt marks it (first use, or the mark was deleted)
	if len(mk) > 0 && !p.marked {
		return nil, true, invalid("AcquirePermit(%q): %q is held as a lock, not a semaphore", p.name, p.name)
	}
	if p.out.queued {
		me := &mvccpb.KeyValue{Key: []byte(p.place), Value: p.val, CreateRevision: p.out.rev, Lease: int64(a.lease)}
		a.unknown = append(a.unknown, tried{p.place, string(p.val)}) // deleted if the call gives up
		return p.waitTurn(ctx, a, me, p.out.slots, p.out.rev)
	}
	s := p.split(a, p.out.slots)
	if s.ours != nil {
		return a.found([]string{c.nameOf(s.ours)}, []string{string(s.ours.Key)}, s.ours), false, nil
	}
	p.slot = 0
	if len(s.orphans) > 0 && c.dropOrphans(ctx, s.orphans) == nil {
		return nil, false, nil
	}
	if free := p.pickFree(s.taken); free >= 0 && len(s.line) == 0 {
		p.slot = free
		return nil, false, nil
	}
	if p.wait {
		return nil, false, nil // the next attempt queues
	}
	held := slices.DeleteFunc(append(slices.Clone(s.taken), s.line...), func(kv *mvccpb.KeyValue) bool { return kv == nil })
	info := decodeInfo(c.nameOf(held[0]), held[0])
	return nil, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
}

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
		case clientv3.LeaseID(kv.Lease) != a.lease && bytes.HasPrefix(kv.Value, c.valuePrefix):
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
	mark := c.storesSessionKey(a.lease)
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
			c.sessionKeyStored(a.lease)
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
