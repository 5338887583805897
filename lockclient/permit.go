package lockclient

import (
	"context"
	"slices"

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
// of arrival (the first free slot to the oldest), except that one whose
// WithValue value is over 256 KiB waits without a place and tries again when
// a slot is freed. See
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

// txnPermit sends one attempt from slot p.slot and returns the keys it may
// have put. Marked, it tries up to maxChain slots in one Txn while nobody
// waits, and a waiting call queues (its place) when none is free or others
// wait; else (first use), or when the session key is to be stored with this
// grant (as txnCreate does), it tries that slot alone, putting the mark (no
// lease) or session key with it.
func (c *Client) txnPermit(ctx context.Context, p *permitKind, lease clientv3.LeaseID, val []byte) (outcome, []string, error) {
	mark := c.sess.marks(lease)
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
	if marked && p.wait && len(val) <= maxInline { // a larger value waits without a place
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
		c.sess.markStored(lease)
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
	switch {
	case p.wait && len(p.val) <= maxInline:
		return nil, false, nil // the next attempt queues
	case p.wait && slices.Contains(s.taken, nil):
		return nil, false, nil // a free slot behind waiters: try the first one again
	case p.wait:
		c.waiting(ctx, p.name, s.taken[0])
		if err := c.waitSlotFreed(ctx, p, p.out.rev); err != nil {
			return nil, true, err
		}
		return nil, false, nil
	}
	held := slices.DeleteFunc(append(slices.Clone(s.taken), s.line...), func(kv *mvccpb.KeyValue) bool { return kv == nil })
	info := decodeInfo(c.nameOf(held[0]), held[0])
	return nil, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
}
