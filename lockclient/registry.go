package lockclient

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// registry is the Client's held locks: by name, and the manual-renewal ones
// by deadline. It holds the locks of one session lease at a time; the session
// opens and empties it, holding its own lock first (lock order: session,
// then registry). It never calls out while holding its lock.
type registry struct {
	mu     sync.Mutex
	lease  clientv3.LeaseID // the live session's; 0 when there is none
	closed bool
	locks  map[string]*Lock
	manual lockHeap
}

func newRegistry() *registry { return &registry{locks: make(map[string]*Lock)} }

// open starts holding the locks of lease.
func (r *registry) open(lease clientv3.LeaseID) {
	r.mu.Lock()
	r.lease = lease
	r.mu.Unlock()
}

// take empties the registry and returns what it held; with close, for good.
func (r *registry) take(close bool) []*Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lease = 0
	r.closed = r.closed || close
	locks := make([]*Lock, 0, len(r.locks))
	seen := make(map[*Lock]bool, len(r.locks))
	for _, l := range r.locks {
		if !seen[l] { // a set is registered under each of its names
			seen[l] = true
			locks = append(locks, l)
		}
	}
	clear(r.locks)
	r.manual = nil
	return locks
}

// add registers l under each of its names and runs spawn, if l's session is
// the live one (else ErrClosed or ErrSessionLost). It returns the locks l
// displaces (ours, that cannot hold the key l just created: released by token
// elsewhere, or expired), whether l is its session's first lock, and whether
// l's is now the earliest manual deadline.
func (r *registry) add(l *Lock, sent time.Time, spawn func()) (olds []*Lock, first, earliest bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false, false, ErrClosed
	}
	if r.lease != l.lease {
		return nil, false, false, ErrSessionLost
	}
	first = len(r.locks) == 0
	for _, n := range l.names {
		if old := r.locks[n]; old != nil && old != l {
			r.dropLocked(old)
			olds = append(olds, old)
		}
		r.locks[n] = l
	}
	if spawn != nil {
		spawn() // under the lock: Close closes the registry before it waits for goroutines
	}
	if l.manual {
		l.deadline = sent.Add(l.dur)
		heap.Push(&r.manual, l)
		earliest = r.manual[0] == l
	}
	return olds, first, earliest, nil
}

// remove unregisters l; it reports whether l was held.
func (r *registry) remove(l *Lock) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.locks[l.name] != l {
		return false
	}
	r.dropLocked(l)
	return true
}

// lose ends l as lost, if it is still registered, with why (nil: its key
// was deleted or replaced); false if it was not held.
func (r *registry) lose(l *Lock, why error) bool {
	if !r.remove(l) {
		return false
	}
	l.lose(why)
	return true
}

// drop removes l under each name still registered to it (a set's other names
// after its loss).
func (r *registry) drop(l *Lock) {
	r.mu.Lock()
	r.dropLocked(l)
	r.mu.Unlock()
}

// dropLocked removes l under each name still registered to it, and from the
// manual heap if it is there (emptying the registry empties the heap without it).
func (r *registry) dropLocked(l *Lock) {
	for _, n := range l.names {
		if r.locks[n] == l {
			delete(r.locks, n)
		}
	}
	if i := l.index; i >= 0 && i < len(r.manual) && r.manual[i] == l {
		heap.Remove(&r.manual, i)
	}
}

// get returns the lock registered under name, or nil.
func (r *registry) get(name string) *Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.locks[name]
}

// busy reports whether any lock is held.
func (r *registry) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.locks) > 0
}

// renewed reports whether l is held and, if it renews manually, moves its
// deadline to sent + its lease if later: in one step, so that a renewal that
// reports l held also keeps the clock from ending it.
func (r *registry) renewed(l *Lock, sent time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.locks[l.name] != l {
		return false
	}
	if d := sent.Add(l.dur); l.manual && d.After(l.deadline) {
		l.deadline = d
		heap.Fix(&r.manual, l.index)
	}
	return true
}

// due reports whether l is a held manual-renewal lock whose deadline passed at now.
func (r *registry) due(l *Lock, now time.Time) bool {
	if !l.manual {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.locks[l.name] == l && !now.Before(l.deadline)
}

// next returns the earliest manual-renewal deadline; zero when none.
func (r *registry) next() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.manual) == 0 {
		return time.Time{}
	}
	return r.manual[0].deadline
}

// expire unregisters and returns the manual-renewal locks whose deadline
// passed at now.
func (r *registry) expire(now time.Time) []*Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	var expired []*Lock
	for len(r.manual) > 0 && !now.Before(r.manual[0].deadline) {
		l := heap.Pop(&r.manual).(*Lock)
		delete(r.locks, l.name)
		expired = append(expired, l)
	}
	return expired
}

// expire is the session's clock, a timer of its own (session.expiry) that no etcd
// call can hold back: at the session deadline, without a confirmed renewal,
// the session is lost; at a manual-renewal lock's deadline, that lock is lost
// (ErrNotRenewed) and its keys are queued for deletion.
func (c *Client) expire(lease clientv3.LeaseID) {
	expired, past := c.sess.tick(lease, time.Now())
	for _, l := range expired {
		l.lose(ErrNotRenewed)
	}
	if len(expired) > 0 {
		c.sess.wake() // their deletes
	}
	if past {
		c.loseLease(lease, "no renewal confirmed before the session deadline")
	}
}

// expireDue runs the session's clock at once when l's deadline (the
// session's, or its own under manual renewal) has passed and the clock's timer
// has not run yet, as after the process was frozen: whoever looks at l after
// its deadline sees it ended, whichever goroutine runs first on waking.
func (c *Client) expireDue(l *Lock) {
	if l.ctx.Err() != nil {
		return
	}
	now := time.Now()
	if deadline, ok := c.sess.live(l.lease); ok && (!now.Before(deadline) || c.reg.due(l, now)) {
		c.expire(l.lease)
	}
}

// loseLease ends session lease if it is still the Client's: every lock of it
// ends (fence.ErrLost and ErrSessionLost), and the next Acquire starts a new
// session after the backoff. The lease is not revoked: etcd expires it.
func (c *Client) loseLease(lease clientv3.LeaseID, why string) {
	locks, ok := c.sess.lose(lease)
	if !ok {
		return
	}
	for _, l := range locks {
		l.end(fmt.Errorf("%w: %w", grant.Lost(l.name, l.token), ErrSessionLost))
	}
	c.sessionLost(lease, why, len(locks))
}

// keyGone ends l as lost because its key is gone or carries another token.
// When l's session lease ran out (its local deadline passed, or etcd no
// longer has it) that is the cause, as for every lock of the session: a key
// deleted by the lease's expiry was not deleted by someone else.
func (c *Client) keyGone(ctx context.Context, l *Lock) {
	if l.ctx.Err() != nil {
		return // ended meanwhile (released, lost, closed)
	}
	deadline, ok := c.sess.live(l.lease)
	if !ok {
		return // the session ended, and every lock of it with it
	}
	why := ""
	if !time.Now().Before(deadline) {
		why = "no renewal confirmed before the session deadline"
	} else if resp, err := c.cli.TimeToLive(ctx, l.lease); err == nil && resp.TTL < 0 {
		// -1: gone. etcd rounds what is left down to whole seconds, so a live
		// lease with under a second left says 0.
		why = "etcd no longer has the session lease"
	}
	if why != "" {
		c.loseLease(l.lease, why)
		return
	}
	c.reg.lose(l, nil)
}

// armMaxHold ends l at its max hold, counted from sent, on a timer stopped
// when l ends first: no goroutine waits for it.
func (c *Client) armMaxHold(l *Lock, sent time.Time) {
	if l.maxHold <= 0 {
		return
	}
	t := time.AfterFunc(time.Until(sent.Add(l.maxHold)), func() { c.maxHoldReached(l) })
	context.AfterFunc(l.ctx, func() { t.Stop() })
}

// maxHoldReached ends l with ErrMaxHold if it is still held, then deletes its
// keys as Release does.
func (c *Client) maxHoldReached(l *Lock) {
	if !c.reg.lose(l, ErrMaxHold) {
		return
	}
	if len(l.names) > 1 {
		return // lose dropped the set's keys
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	c.releaseKeys(ctx, l)
}

// dropSet finishes the loss of a set: its names still registered to it are
// unregistered, and its keys that still carry its token are deleted in the
// background, so that its other names do not stay held for the session's life.
func (c *Client) dropSet(l *Lock) {
	c.reg.drop(l)
	c.pendDeletes(l.keys, l.token)
}

// lockHeap orders manual-renewal locks by deadline, for the session's clock.
type lockHeap []*Lock

func (h lockHeap) Len() int { return len(h) }

func (h lockHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *lockHeap) Push(x any) {
	l := x.(*Lock)
	l.index = len(*h)
	*h = append(*h, l)
}

func (h *lockHeap) Pop() any {
	old := *h
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.index = -1
	*h = old[:n-1]
	return l
}

// followKey ends l as lost once etcd reports its key deleted or replaced; one
// wait for the term's life.
func (c *Client) followKey(l *Lock) {
	defer c.loops.Done()
	key := l.keys[0]
	gone := func(kv *mvccpb.KeyValue) bool { return kv == nil || fence.Token(kv.CreateRevision) != l.token }
	err := c.wait(l.ctx, watchSpec{
		key: key, rev: int64(l.token) + 1, // the key was created at the token's revision
		event: func(ev *clientv3.Event) bool { return ev.Type == mvccpb.DELETE || gone(ev.Kv) },
		reread: func(ctx context.Context) (int64, bool, error) {
			resp, err := c.cli.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				return 0, err == nil, err
			}
			return resp.Header.Revision + 1, gone(resp.Kvs[0]), nil
		},
	})
	if err == nil {
		c.keyGone(l.ctx, l)
	}
}
