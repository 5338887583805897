package lockclient

import (
	"container/heap"
	"sync"
	"time"

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
	for _, l := range r.locks {
		locks = append(locks, l)
	}
	clear(r.locks)
	r.manual = nil
	return locks
}

// add registers l under each of its names, if its session is the live one:
// the locks it displaces (ours, that cannot hold the key l just created: they
// were released by token elsewhere or expired), whether l is the first lock
// of its session, and whether l's is now the earliest manual deadline.
// closed or lost: l's session is not live.
func (r *registry) add(l *Lock, sent time.Time, spawn func()) (olds []*Lock, first, earliest bool, lost error) {
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
		spawn() // under the lock: Close, which empties the registry, waits for it
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

// holds reports whether l is registered.
func (r *registry) holds(l *Lock) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.locks[l.name] == l
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

// renewed moves manual-renewal lock l's deadline to sent + its lease, if later.
func (r *registry) renewed(l *Lock, sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := sent.Add(l.dur); r.locks[l.name] == l && d.After(l.deadline) {
		l.deadline = d
		heap.Fix(&r.manual, l.index)
	}
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
