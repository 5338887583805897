package lockclient

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/lockname"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxPermits is the largest n AcquirePermit accepts: a slot's index is four
// decimal digits, and one Txn reads every slot of a semaphore.
const MaxPermits = lockname.MaxSlots

// AcquirePermit takes one of n permits of the semaphore name, waiting while n
// are held, until it is granted or ctx ends. A permit is a *Lock on a slot
// name/NNNN (the first free slot below n) with its own token, on the same
// session, lease and loss signals as Acquire's; waiting writes nothing. See
// the package doc (Semaphores) for what a permit fences and what n means.
//
// Errors: those of Acquire; fence.ErrInvalidArgument also for n < 1 or above
// MaxPermits (before any I/O) and when name is a lock, not a semaphore.
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
	mark   string // the name's own key: the semaphore mark
	slots  string // the slots' key prefix
	slot   int    // the slot the next attempt tries first
	marked bool   // the last attempt found the mark
	reads  int    // refused attempts so far
	out    outcome
}

func (c *Client) newPermitRequest(name string, n int, opts []LockOption, wait bool) (*request, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := fence.CheckResource(slotName(name, 0)); err != nil {
		return nil, invalid("semaphore %q: name too long for its slot names", name)
	}
	if n < 1 || n > MaxPermits {
		return nil, invalid("semaphore %q: %d permits, want 1 to %d", name, n, MaxPermits)
	}
	lo, err := buildLockOptions(c.ttl, opts)
	if err != nil {
		return nil, err
	}
	// Most calls find the semaphore already marked.
	p := &permitKind{name: name, n: n, mark: c.key(name), slots: c.key(name) + "/", marked: true}
	return &request{names: []string{name}, wait: wait, lo: lo, kind: p}, nil
}

func (p *permitKind) try(ctx context.Context, a *attempt, val []byte) (*granted, []string, error) {
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
	slot    int
	rev     int64              // the Txn's revision: the token when granted
	mark    []*mvccpb.KeyValue // refused: the mark, as read
	slots   []*mvccpb.KeyValue // refused: every slot, as read
}

// txnPermit sends one attempt from slot p.slot and returns the keys it may
// have put. Marked, it tries up to maxChain slots in one Txn; else (first
// use), or when the session key is to be stored with this grant (as txnCreate
// does), it tries that slot alone, putting the mark (no lease) or session key
// with it.
func (c *Client) txnPermit(ctx context.Context, p *permitKind, lease clientv3.LeaseID, val []byte) (outcome, []string, error) {
	mark := c.storesSessionKey(lease)
	from, marked := p.slot, p.marked
	to := from + 1
	if marked && !mark {
		to = min(p.n, from+max(1, min(maxChain, chainBytes/len(val))))
	}
	keys := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		keys = append(keys, c.key(slotName(p.name, i)))
	}
	markCmp := clientv3.Compare(clientv3.Value(p.mark), "=", semaphoreMark)
	var extra []clientv3.Op
	if !marked {
		markCmp = clientv3.Compare(clientv3.CreateRevision(p.mark), "=", 0)
		extra = append(extra, clientv3.OpPut(p.mark, semaphoreMark))
	}
	if mark {
		extra = append(extra, clientv3.OpPut(sessionKey(c.prefix, int64(lease)), "", clientv3.WithLease(lease)))
	}
	resp, err := retryOverload(ctx, c, "acquire", func() (*clientv3.TxnResponse, error) {
		return c.cli.Txn(ctx).If(markCmp).Then(p.chain(keys, lease, val, extra)).
			Else(clientv3.OpGet(p.mark), clientv3.OpGet(p.slots, clientv3.WithPrefix())).Commit()
	})
	if err != nil {
		return outcome{}, keys, err
	}
	if !resp.Succeeded {
		return outcome{mark: resp.Responses[0].GetResponseRange().GetKvs(), slots: resp.Responses[1].GetResponseRange().GetKvs(),
			rev: resp.Header.Revision}, nil, nil
	}
	if mark {
		c.sessionKeyStored(lease)
	}
	rev, slot := resp.Header.Revision, from
	for t := resp.Responses[0].GetResponseTxn(); !t.Succeeded; slot++ {
		next := t.Responses[0]
		if t = next.GetResponseTxn(); t == nil { // every slot of the run was taken
			marks := []*mvccpb.KeyValue{{Value: []byte(semaphoreMark)}}
			return outcome{mark: marks, slots: next.GetResponseRange().GetKvs(), rev: rev}, nil, nil
		}
	}
	return outcome{granted: true, slot: slot, rev: rev}, nil, nil
}

// chain is the nested Txn that puts the first free key of keys (with extra),
// else reads every slot.
func (p *permitKind) chain(keys []string, lease clientv3.LeaseID, val []byte, extra []clientv3.Op) clientv3.Op {
	els := clientv3.OpGet(p.slots, clientv3.WithPrefix())
	if len(keys) > 1 {
		els = p.chain(keys[1:], lease, val, extra)
	}
	put := append([]clientv3.Op{clientv3.OpPut(keys[0], string(val), clientv3.WithLease(lease))}, extra...)
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(keys[0]), "=", 0)}, put, []clientv3.Op{els})
}

// blocked reads a refused attempt: the slot and mark state for the next one,
// or done with a permit an earlier attempt of this call took (its answer
// lost), a *HeldError for a try, a lock's name, or a failed wait.
func (p *permitKind) blocked(ctx context.Context, a *attempt) (*granted, bool, error) {
	c := a.c
	mk := p.out.mark
	p.marked = len(mk) > 0 // if not, the next attempt marks it (first use, or the mark was deleted)
	if p.marked && !isMark(mk[0].Value) {
		return nil, true, invalid("AcquirePermit(%q): %q is held as a lock, not a semaphore", p.name, p.name)
	}
	taken := make([]*mvccpb.KeyValue, p.n)
	var orphans []*mvccpb.KeyValue
	for _, kv := range p.out.slots {
		i, ok := slotIndex(c.nameOf(kv), p.name)
		switch {
		case !ok || i >= p.n:
			continue // a slot of a caller with a larger n: not ours to count
		case a.ours(kv):
			return a.found([]string{c.nameOf(kv)}, []string{string(kv.Key)}, kv), false, nil
		case clientv3.LeaseID(kv.Lease) != a.lease && bytes.HasPrefix(kv.Value, c.valuePrefix):
			orphans = append(orphans, kv)
		}
		taken[i] = kv
	}
	p.slot = 0
	if len(orphans) > 0 && c.dropOrphans(ctx, orphans) == nil {
		p.slot = slices.Index(taken, orphans[0])
		return nil, false, nil
	}
	if free := p.pickFree(taken); free >= 0 {
		p.slot = free
		return nil, false, nil
	}
	if !a.r.wait {
		info := decodeInfo(c.nameOf(taken[0]), taken[0])
		return nil, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
	}
	c.waiting(ctx, c.nameOf(taken[0]), taken[0])
	if err := c.waitSlotFreed(ctx, p, p.out.rev); err != nil {
		return nil, true, err
	}
	return nil, false, nil
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

// Permits returns the holders of the semaphore name's permits, by slot, as
// List reports them (Info.Semaphore is name); none when no permit is held.
//
// Errors: fence.ErrInvalidArgument for a bad name; ErrClosed; etcd's error.
func (c *Client) Permits(ctx context.Context, name string) ([]Info, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	infos, err := c.list(ctx, c.key(name)+"/")
	if err != nil {
		return nil, fmt.Errorf("lockclient: permits of %q: %w", name, err)
	}
	return infos, nil
}
