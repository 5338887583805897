package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Fair waiting: a waiting Acquire (or AcquirePermit) writes its place in a line
// once, and waiters are granted in the order their places reached etcd, each
// with its place's revision as its token. Holder's Info.Waiting shows the line,
// which is how these tests start waiters in a known order: waiter i+1 starts
// only once Holder shows waiter i in line.

// lineBound keeps a broken build from hanging the suite while a test waits for
// a waiter to show in line; it is no timing assertion (a place is one write).
const lineBound = 30 * time.Second

// fairGrant is one grant seen by a waiter goroutine: the waiter's index in
// the order it was started, and its lock.
type fairGrant struct {
	idx  int
	lock *lockclient.Lock
}

// fairLine runs waiter goroutines, each on a Client of its own, and checks
// that no more than limit of them hold at once (inside counts the holders:
// a waiter adds itself when granted, and the test takes it out before it
// releases the waiter's lock, in release; overlaps counts the grants made
// while limit held, told by the test's goroutine).
type fairLine struct {
	t        *testing.T
	srv      *locktest.Cluster
	limit    int32
	inside   atomic.Int32
	overlaps atomic.Int32
	grants   chan fairGrant
	errs     []chan error         // each waiter's Acquire error, when it returns one
	stop     []context.CancelFunc // each waiter's ctx
}

func newFairLine(t *testing.T, srv *locktest.Cluster, limit int32) *fairLine {
	f := &fairLine{t: t, srv: srv, limit: limit, grants: make(chan fairGrant, 64)}
	t.Cleanup(f.checkOverlaps)
	return f
}

func (f *fairLine) checkOverlaps() {
	f.t.Helper()
	if n := f.overlaps.Swap(0); n > 0 {
		f.t.Errorf("%d grants made while %d others held", n, f.limit)
	}
}

// client returns a new Client with its own etcd connection and identity id,
// its session already granted (one grant and release of a name of its own),
// so that its first wait writes nothing but its place.
func (f *fairLine) client(id string) *lockclient.Client {
	f.t.Helper()
	c := newClient(f.t, f.srv.Client(f.t), lockclient.WithIdentity(id))
	l := mustAcquire(f.t, c, "warm-"+id)
	if err := l.Release(f.t.Context()); err != nil {
		f.t.Fatalf("Release: %v", err)
	}
	return c
}

// start starts waiter idx: acquire, under a ctx of its own, reports its grant
// on f.grants and its error on f.errs[idx].
func (f *fairLine) start(acquire func(ctx context.Context) (*lockclient.Lock, error)) int {
	idx := len(f.errs)
	ctx, cancel := context.WithCancel(f.t.Context())
	errc := make(chan error, 1)
	f.errs, f.stop = append(f.errs, errc), append(f.stop, cancel)
	go func() {
		l, err := acquire(ctx)
		if err != nil {
			errc <- err
			return
		}
		if f.inside.Add(1) > f.limit {
			f.overlaps.Add(1)
		}
		f.grants <- fairGrant{idx, l}
	}()
	return idx
}

// next returns the next grant.
func (f *fairLine) next() fairGrant {
	f.t.Helper()
	select {
	case g := <-f.grants:
		f.checkOverlaps()
		return g
	case <-time.After(2 * time.Minute):
		f.t.Fatal("no waiter was granted")
		return fairGrant{}
	}
}

// release takes a granted waiter out of the holders and releases its lock.
func (f *fairLine) release(l *lockclient.Lock) {
	f.t.Helper()
	f.inside.Add(-1)
	if err := l.Release(f.t.Context()); err != nil {
		f.t.Fatalf("Release %s token %d: %v", l.Resource(), l.Token(), err)
	}
}

// expect takes the next grants and checks that they go, one at a time, to the
// waiters order names, with rising tokens above after and, where tokens has
// one for the waiter, equal to it (its place's revision). Each is released
// once checked, except the last, which is returned.
func (f *fairLine) expect(order []int, after fence.Token, tokens map[int]fence.Token) *lockclient.Lock {
	f.t.Helper()
	var last *lockclient.Lock
	for k, want := range order {
		if last != nil {
			f.release(last)
		}
		g := f.next()
		if g.idx != want {
			f.t.Fatalf("grant %d went to waiter %d, want waiter %d (line order %v)", k, g.idx, want, order)
		}
		if tok := g.lock.Token(); tok <= after {
			f.t.Fatalf("waiter %d granted token %d after token %d", g.idx, tok, after)
		}
		if tok, ok := tokens[g.idx]; ok && g.lock.Token() != tok {
			f.t.Fatalf("waiter %d granted token %d, but its place in line had revision %d", g.idx, g.lock.Token(), tok)
		}
		after, last = g.lock.Token(), g.lock
	}
	return last
}

// who names a waiter or holder: its ClientID, or its PID when another process
// holds or waits (a process of runHolder's, whose ID is random).
func who(in lockclient.Info) string {
	if in.PID != os.Getpid() {
		return "pid-" + strconv.Itoa(in.PID)
	}
	return in.ClientID
}

// waitLine waits until Holder of name shows want waiting (by who), and returns
// the line, having checked each place: a token (its revision) above the
// holder's and the places before it, and the time its waiter asked.
func waitLine(t *testing.T, c *lockclient.Client, name string, want ...string) []lockclient.Info {
	t.Helper()
	var (
		seen    []string
		lastErr error
	)
	for deadline := time.Now().Add(lineBound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		info, err := c.Holder(t.Context(), name)
		if err != nil {
			lastErr = err
			continue
		}
		lastErr, seen = nil, seen[:0]
		for _, w := range info.Waiting {
			seen = append(seen, who(w))
		}
		if !slices.Equal(seen, want) {
			continue
		}
		after := info.Token
		for i, w := range info.Waiting {
			if w.Token <= after || w.AcquiredAt.IsZero() {
				t.Fatalf("place %d of %q's line: %s token %d asked at %v, after token %d: want a higher token and the time it asked", i, name, who(w), w.Token, w.AcquiredAt, after)
			}
			after = w.Token
		}
		return info.Waiting
	}
	t.Fatalf("Holder(%q) never showed %v waiting (last seen %v, error %v)", name, want, seen, lastErr)
	return nil
}

// TestClient_Acquire_fifo queues 20 waiters, each its own Client, behind a
// holder in a known order: releasing in turn grants them in exactly that
// order, each with its place's revision as its token (so tokens rise), and
// never two at once. A TryAcquire meanwhile is refused without joining the
// line or writing anything.
func TestClient_Acquire_fifo(t *testing.T) {
	const name, waiters = "fifo", 20
	srv := locktest.Start(t)
	cli := srv.Client(t)
	f := newFairLine(t, srv, 1)
	h := f.client("holder")
	hl := mustAcquire(t, h, name)
	f.inside.Add(1)
	var ids []string
	var line []lockclient.Info
	for i := range waiters {
		id := fmt.Sprintf("waiter-%02d", i)
		c := f.client(id)
		f.start(func(ctx context.Context) (*lockclient.Lock, error) { return c.Acquire(ctx, name) })
		ids = append(ids, id)
		line = waitLine(t, h, name, ids...)
	}

	other := f.client("trier")
	before := revision(t, cli)
	if _, err := other.TryAcquire(t.Context(), name); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire of a lock with a line = %v, want ErrHeld", err)
	}
	if after := revision(t, cli); after != before {
		t.Fatalf("a refused TryAcquire wrote %d revisions, want 0", after-before)
	}
	waitLine(t, h, name, ids...)

	tokens := map[int]fence.Token{}
	order := make([]int, waiters)
	for i := range order {
		order[i], tokens[i] = i, line[i].Token
	}
	f.release(hl)
	// While each holds, Holder shows it and the rest of the line.
	top := hl.Token()
	for i := range waiters {
		last := f.expect(order[i:i+1], top, tokens)
		top = last.Token()
		info, err := h.Holder(t.Context(), name)
		if err != nil || info.ClientID != ids[i] || info.Token != last.Token() {
			t.Fatalf("Holder while waiter %d holds = %s token %d, %v; want %s token %d", i, info.ClientID, info.Token, err, ids[i], last.Token())
		}
		var rest []string
		for _, w := range info.Waiting {
			rest = append(rest, w.ClientID)
		}
		if !slices.Equal(rest, ids[i+1:]) {
			t.Fatalf("while waiter %d holds, the line is %v, want %v", i, rest, ids[i+1:])
		}
		f.release(last)
	}
	if _, err := h.Holder(t.Context(), name); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("Holder after every waiter released = %v, want ErrNotHeld", err)
	}
}

// TestClient_Acquire_cancelledWaiter ends the ctx of one of three waiters
// while it waits (at the head, in the middle, at the tail): its Acquire
// returns ctx's error, its place leaves the line, and the others are granted
// in order, the one behind it not blocked.
func TestClient_Acquire_cancelledWaiter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cancel int   // the waiter whose ctx ends
		rest   []int // the others, in line order
	}{
		{"head", 0, []int{1, 2}},
		{"middle", 1, []int{0, 2}},
		{"tail", 2, []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const name = "cancelled"
			srv := shared.Cluster(t)
			f := newFairLine(t, srv, 1)
			h := f.client("holder")
			hl := mustAcquire(t, h, name)
			f.inside.Add(1)
			ids := []string{"A", "B", "C"}
			var line []lockclient.Info
			for i, id := range ids {
				c := f.client(id)
				f.start(func(ctx context.Context) (*lockclient.Lock, error) { return c.Acquire(ctx, name) })
				line = waitLine(t, h, name, ids[:i+1]...)
			}

			f.stop[tc.cancel]()
			select {
			case err := <-f.errs[tc.cancel]:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled waiter's Acquire = %v, want context.Canceled", err)
				}
			case g := <-f.grants:
				t.Fatalf("waiter %d granted token %d while the holder holds", g.idx, g.lock.Token())
			case <-time.After(2 * time.Minute):
				t.Fatal("the cancelled waiter's Acquire never returned")
			}
			var rest []string
			tokens := map[int]fence.Token{}
			for _, i := range tc.rest {
				rest = append(rest, ids[i])
				tokens[i] = line[i].Token
			}
			waitLine(t, h, name, rest...)

			f.release(hl)
			f.release(f.expect(tc.rest, hl.Token(), tokens))
			if _, err := h.Holder(t.Context(), name); !errors.Is(err, lockclient.ErrNotHeld) {
				t.Fatalf("Holder after the line = %v, want ErrNotHeld", err)
			}
		})
	}
}

// TestClient_AcquirePermit_fifo fills a semaphore of 2 and queues 5 waiters
// in a known order (each started once the one before has written its place:
// etcd's revision rose); each freed slot goes to the oldest waiter, with
// rising tokens and never more than 2 permits held.
func TestClient_AcquirePermit_fifo(t *testing.T) {
	const name, n, waiters = "pool", 2, 5
	srv := locktest.Start(t)
	cli := srv.Client(t)
	f := newFairLine(t, srv, n)
	h := f.client("holder")
	held := []*lockclient.Lock{mustPermit(t, h, name, n), mustPermit(t, h, name, n)}
	f.inside.Add(n)
	order := make([]int, waiters)
	for i := range waiters {
		c := f.client(fmt.Sprintf("waiter-%d", i))
		before := revision(t, cli)
		order[i] = f.start(func(ctx context.Context) (*lockclient.Lock, error) { return c.AcquirePermit(ctx, name, n) })
		waitRevision(t, cli, before, fmt.Sprintf("waiter %d's place", i))
	}

	// Releases free one slot at a time; each goes to the next waiter in line.
	top := max(held[0].Token(), held[1].Token())
	for i := range waiters {
		f.release(held[0])
		l := f.expect(order[i:i+1], top, nil)
		held, top = append(held[1:], l), l.Token()
	}
	for _, l := range held {
		f.release(l)
	}
}

// waitRevision waits until etcd's revision is above before: what was sent
// has been written.
func waitRevision(t *testing.T, cli *clientv3.Client, before int64, what string) {
	t.Helper()
	for deadline := time.Now().Add(lineBound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if revision(t, cli) > before {
			return
		}
	}
	t.Fatalf("%s never reached etcd (revision still %d)", what, before)
}
