package lockclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

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

// permitReq is one AcquirePermit call.
type permitReq struct {
	name  string
	n     int
	mark  string // the name's own key: the semaphore mark
	slots string // the slots' key prefix
	wait  bool
	lo    lockOptions
	reads int // refused attempts so far
}

// tried is one attempt whose outcome is unknown: the slot key and the value it wrote.
type tried struct{ key, val string }

func (c *Client) permitObserved(ctx context.Context, name string, n int, opts []LockOption, wait bool) (*Lock, error) {
	return c.observed(ctx, name, wait, func(ctx context.Context) (*Lock, error) {
		p, err := c.newPermitReq(name, n, opts, wait)
		if err != nil {
			return nil, err
		}
		return c.acquirePermit(ctx, p)
	})
}

func (c *Client) newPermitReq(name string, n int, opts []LockOption, wait bool) (*permitReq, error) {
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
	return &permitReq{name: name, n: n, mark: c.key(name), slots: c.key(name) + "/", wait: wait, lo: lo}, nil
}

// request is the lock request of slot i.
func (p *permitReq) request(i int, c *Client) *request {
	s := slotName(p.name, i)
	return &request{names: []string{s}, keys: []string{c.key(s)}, wait: p.wait, lo: p.lo}
}

// acquirePermit is the permit path, Acquire's with slots: each attempt is one
// Txn that, if the name is a semaphore, puts the first free slot of a run of
// slots under the session lease (nested Txns, one per slot), else reads the
// mark and every slot; the first use marks the name, on one slot. With no
// free slot below n it waits for a slot's delete.
func (c *Client) acquirePermit(ctx context.Context, p *permitReq) (*Lock, error) {
	var lease clientv3.LeaseID
	var unknown []tried
	slot, marked := 0, true // most calls find the semaphore already marked
	for {
		cur, err := c.session(ctx)
		if err != nil {
			c.forgetTried(unknown)
			return nil, err
		}
		if cur != lease {
			lease, unknown = cur, nil
		}
		r := p.request(slot, c)
		sent := time.Now()
		val := c.encode(sent, r)
		out, keys, err := c.txnPermit(ctx, p, slot, lease, val, marked)
		if err != nil {
			for _, k := range keys {
				unknown = append(unknown, tried{k, string(val)})
			}
			if err := c.retryAcquire(ctx, err, r, lease); err != nil {
				c.forgetTried(unknown)
				return nil, err
			}
			continue
		}
		if out.granted {
			l, err := c.register(c.newLock(p.request(out.slot, c), fence.Token(out.rev), lease), sent)
			if p.wait && errors.Is(err, ErrSessionLost) {
				continue
			}
			return l, err
		}
		var l *Lock
		var done bool
		l, slot, marked, done, err = c.permitBlocked(ctx, p, out, lease, &unknown)
		if done {
			return l, err
		}
	}
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

// txnPermit sends one attempt from slot from and returns the keys it may have
// put. Marked, it tries up to maxChain slots in one Txn; else (first use), or
// when the session key is to be stored with this grant (as txnCreate does), it
// tries slot from alone, putting the mark (no lease) or session key with it.
func (c *Client) txnPermit(ctx context.Context, p *permitReq, from int, lease clientv3.LeaseID, val []byte, marked bool) (outcome, []string, error) {
	c.mu.Lock()
	mark := c.marked != lease
	c.mu.Unlock()
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
		c.mu.Lock()
		if c.lease == lease {
			c.marked = lease
		}
		c.mu.Unlock()
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
func (p *permitReq) chain(keys []string, lease clientv3.LeaseID, val []byte, extra []clientv3.Op) clientv3.Op {
	els := clientv3.OpGet(p.slots, clientv3.WithPrefix())
	if len(keys) > 1 {
		els = p.chain(keys[1:], lease, val, extra)
	}
	put := append([]clientv3.Op{clientv3.OpPut(keys[0], string(val), clientv3.WithLease(lease))}, extra...)
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(keys[0]), "=", 0)}, put, []clientv3.Op{els})
}

// permitBlocked reads a refused attempt: the slot and mark state for the next
// one, or done with a permit an earlier attempt of this call took (its answer
// lost), a *HeldError for a try, a lock's name, or a failed wait.
func (c *Client) permitBlocked(ctx context.Context, p *permitReq, out outcome, lease clientv3.LeaseID, unknown *[]tried) (l *Lock, slot int, marked, done bool, err error) {
	mk := out.mark
	marked = len(mk) > 0 // if not, the next attempt marks it (first use, or the mark was deleted)
	if marked && !isMark(mk[0].Value) {
		return nil, 0, true, true, invalid("AcquirePermit(%q): %q is held as a lock, not a semaphore", p.name, p.name)
	}
	taken := make([]*mvccpb.KeyValue, p.n)
	var orphans []*mvccpb.KeyValue
	for _, kv := range out.slots {
		i, ok := slotIndex(c.nameOf(kv), p.name)
		if !ok || i >= p.n {
			continue // a slot of a caller with a larger n: not ours to count
		}
		if clientv3.LeaseID(kv.Lease) == lease && slices.ContainsFunc(*unknown, func(t tried) bool { return t.val == string(kv.Value) }) {
			// An earlier attempt whose answer was lost took this slot.
			c.forgetTried(slices.DeleteFunc(*unknown, func(t tried) bool { return t.val == string(kv.Value) }))
			*unknown = nil
			info := decodeInfo(c.nameOf(kv), kv)
			l, err := c.register(c.newLock(p.request(i, c), info.Token, lease), info.AcquiredAt)
			return l, 0, marked, true, err
		}
		if clientv3.LeaseID(kv.Lease) != lease && bytes.HasPrefix(kv.Value, c.valuePrefix) {
			orphans = append(orphans, kv)
		}
		taken[i] = kv
	}
	if len(orphans) > 0 && c.dropOrphans(ctx, orphans) == nil {
		return nil, slices.Index(taken, orphans[0]), marked, false, nil
	}
	if free := p.pickFree(taken); free >= 0 {
		return nil, free, marked, false, nil
	}
	if !p.wait {
		info := decodeInfo(c.nameOf(taken[0]), taken[0])
		return nil, 0, marked, true, &HeldError{Name: info.Name, Holder: info, Token: info.Token}
	}
	c.waiting(ctx, c.nameOf(taken[0]), taken[0])
	if err := c.waitSlotFreed(ctx, p, out.rev); err != nil {
		c.forgetTried(*unknown)
		return nil, 0, marked, true, err
	}
	return nil, 0, marked, false, nil
}

// pickFree returns the slot the next attempt tries: the first free one, or -1.
// After a second refusal (callers racing for the same first free slot, all
// read the same slots) it is a random free one, so racers spread out.
func (p *permitReq) pickFree(taken []*mvccpb.KeyValue) int {
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
func (c *Client) waitSlotFreed(ctx context.Context, p *permitReq, rev int64) error {
	return c.wait(ctx, watchSpec{
		key: p.slots, prefix: true, deletes: true, rev: rev + 1,
		event: func(ev *clientv3.Event) bool {
			i, ok := slotIndex(c.nameOf(ev.Kv), p.name)
			return ev.Type == mvccpb.DELETE && ok && i < p.n
		},
		reread: func(context.Context) (int64, bool, error) { return 0, true, nil },
	})
}

// forgetTried queues deletes of the slots attempts with an unknown outcome may
// have taken, each conditioned on the exact value the attempt wrote.
func (c *Client) forgetTried(ts []tried) {
	for _, t := range ts {
		c.addPending(pendingDelete{key: t.key, cmp: clientv3.Compare(clientv3.Value(t.key), "=", t.val)})
	}
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
