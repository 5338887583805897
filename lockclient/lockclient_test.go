package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// Compile-time: a *Lock is what fenced writes present.
var (
	_ fence.Grant   = (*lockclient.Lock)(nil)
	_ fence.Watched = (*lockclient.Lock)(nil)
)

func TestClient_Acquire_mutualExclusion(t *testing.T) {
	srv := shared.Cluster(t)
	clients := make([]*lockclient.Client, 4)
	for i := range clients {
		clients[i] = newClient(t, srv.Client(t))
	}
	ex := newExclusion(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	hammer(ctx, &wg, ex, 32, []string{"account-1", "account-2"},
		func(i int) *lockclient.Client { return clients[i%len(clients)] },
		func(i int, err error) { t.Errorf("goroutine %d: %v", i, err) })
	wg.Wait()
	if n := ex.count(); n < 32 {
		t.Fatalf("only %d grants in the run: the check proved nothing", n)
	}
	t.Logf("%d grants", ex.count())
}

func TestClient_TryAcquire_held(t *testing.T) {
	srv := locktest.Start(t)
	cli := srv.Client(t)
	a := newClient(t, cli, lockclient.WithIdentity("worker-a"))
	b := newClient(t, srv.Client(t), lockclient.WithIdentity("worker-b"))
	la := mustAcquire(t, a, "invoice-7")
	// The first call also grants b's session; the second shows a refusal writes nothing.
	if _, err := b.TryAcquire(t.Context(), "invoice-7"); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire of a held lock = %v, want ErrHeld", err)
	}
	before := revision(t, cli)
	_, err := b.TryAcquire(t.Context(), "invoice-7")
	var he *lockclient.HeldError
	if !errors.As(err, &he) {
		t.Fatalf("TryAcquire = %v, want *HeldError", err)
	}
	if he.Token != la.Token() || he.Holder.Token != la.Token() || he.Holder.ClientID != "worker-a" || he.Name != "invoice-7" {
		t.Fatalf("HeldError = %+v, want holder worker-a with token %d", he, la.Token())
	}
	if he.Holder.PID != os.Getpid() || he.Holder.AcquiredAt.IsZero() {
		t.Fatalf("holder info %+v lacks pid or acquire time", he.Holder)
	}
	if after := revision(t, cli); after != before {
		t.Fatalf("a refused TryAcquire wrote %d revisions, want 0", after-before)
	}
	// Same client, same name: not reentrant.
	if _, err := a.TryAcquire(t.Context(), "invoice-7"); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire by the holder's own client = %v, want ErrHeld", err)
	}
	if err := la.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lb, err := b.TryAcquire(t.Context(), "invoice-7")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after %d", lb.Token(), la.Token())
	}
}

// TestClient_Acquire_waitsWithOneWrite: a waiter writes its place in line
// once and nothing more while it waits; it is granted that place's token.
func TestClient_Acquire_waitsWithOneWrite(t *testing.T) {
	srv := locktest.Start(t)
	cli := srv.Client(t)
	a := newClient(t, cli)
	b := newClient(t, srv.Client(t))
	la := mustAcquire(t, a, "job")
	if _, err := b.TryAcquire(t.Context(), "other"); err != nil { // grant b's session first
		t.Fatal(err)
	}
	before := revision(t, cli)
	got := make(chan *lockclient.Lock, 1)
	go func() {
		l, err := b.Acquire(t.Context(), "job")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// The waiter must be waiting in line, not polling with writes.
	var place fence.Token
	for place == 0 {
		info, err := a.Holder(t.Context(), "job")
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiting) == 1 {
			place = info.Waiting[0].Token
		}
	}
	time.Sleep(300 * time.Millisecond)
	if after := revision(t, cli); after != before+1 || place != fence.Token(before+1) {
		t.Fatalf("waiting Acquire wrote %d revisions (its place at %d); want its place alone", after-before, place)
	}
	if len(got) != 0 {
		t.Fatal("Acquire returned while the lock was held")
	}
	if err := la.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	lb := <-got
	if lb == nil || lb.Token() != place {
		t.Fatalf("waiter got %v; want its place's token %d", lb, place)
	}
	// place (1 revision) + release (1 revision): nothing else.
	if after := revision(t, cli); after != before+2 {
		t.Fatalf("place + release wrote %d revisions, want 2", after-before)
	}
}

func TestClient_Acquire_contextEnds(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t))
	b := newClient(t, srv.Client(t))
	mustAcquire(t, a, "job")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, "job"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire = %v, want DeadlineExceeded", err)
	}
}

// TestLock_Release_neverDeletesSuccessor is the regression test for etcd's Mutex
// bug #22082: a stale holder's release deleted its successor's key.
func TestLock_Release_neverDeletesSuccessor(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t))
	b := newClient(t, srv.Client(t))
	admin := newClient(t, srv.Client(t))

	stale := mustAcquire(t, a, "account-42")
	// The lock passes on behind a's back (an operator releases it by token).
	if err := admin.Release(t.Context(), "account-42", stale.Token()); err != nil {
		t.Fatalf("Release by token: %v", err)
	}
	fresh := mustAcquire(t, b, "account-42")

	tests := []struct {
		name    string
		release func() error
	}{
		{"stale lock", func() error { return stale.Release(t.Context()) }},
		{"stale token", func() error { return admin.Release(t.Context(), "account-42", stale.Token()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.release()
			var nh *lockclient.NotHeldError
			if !errors.As(err, &nh) || nh.Current != fresh.Token() {
				t.Fatalf("stale release = %v, want *NotHeldError naming token %d", err, fresh.Token())
			}
			info, err := admin.Holder(t.Context(), "account-42")
			if err != nil || info.Token != fresh.Token() || info.ClientID != b.ID() {
				t.Fatalf("after a stale release Holder = %+v, %v; want token %d of %s", info, err, fresh.Token(), b.ID())
			}
			if isClosed(fresh.Done()) {
				t.Fatal("the new holder's lock ended")
			}
		})
	}
	if err := fresh.Release(t.Context()); err != nil {
		t.Fatalf("new holder's Release: %v", err)
	}
}

func TestLock_Release_endsLock(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	l := mustAcquire(t, c, "job")
	if isClosed(l.Done()) {
		t.Fatal("Done closed on a held lock")
	}
	if err := fence.CheckGrant(l); err != nil {
		t.Fatalf("CheckGrant on a held lock: %v", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !isClosed(l.Done()) || !errors.Is(context.Cause(l.Context()), lockclient.ErrReleased) {
		t.Fatalf("after Release: Done closed %v, cause %v", isClosed(l.Done()), context.Cause(l.Context()))
	}
	if err := fence.CheckGrant(l); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("CheckGrant after Release = %v, want ErrLost", err)
	}
	if err := l.Release(t.Context()); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	if err := l.Renew(t.Context()); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("Renew after Release = %v, want ErrNotHeld", err)
	}
	if _, err := c.Holder(t.Context(), "job"); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("Holder after Release = %v, want ErrNotHeld", err)
	}
}

func TestClient_HolderAndList(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t), lockclient.WithIdentity("billing-1"), lockclient.WithTTL(5*time.Second))
	other := newClient(t, srv.Client(t), lockclient.WithPrefix("/other/"))
	la := mustAcquire(t, a, "account-1")
	lb := mustAcquire(t, a, "account-2")
	mustAcquire(t, other, "account-3") // another prefix: not listed

	host, _ := os.Hostname()
	check := func(info lockclient.Info, l *lockclient.Lock) {
		t.Helper()
		if info.Name != l.Resource() || info.Token != l.Token() || info.ClientID != "billing-1" ||
			info.Host != host || info.PID != os.Getpid() || info.AcquiredAt.IsZero() ||
			info.LeaseLeft <= 0 || info.LeaseLeft > 5*time.Second {
			t.Fatalf("Info = %+v, want %s token %d of billing-1 with 0 < lease left <= 5s", info, l.Resource(), l.Token())
		}
	}
	info, err := a.Holder(t.Context(), "account-1")
	if err != nil {
		t.Fatal(err)
	}
	check(info, la)
	list, err := a.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("List = %+v, want 2 locks", list)
	}
	check(list[0], la)
	check(list[1], lb)
}

func TestClient_Close(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	watcher := newClient(t, srv.Client(t))
	l1 := mustAcquire(t, c, "a")
	l2 := mustAcquire(t, c, "b", lockclient.WithManualRenewal(0))
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, l := range []*lockclient.Lock{l1, l2} {
		if !isClosed(l.Done()) || !errors.Is(context.Cause(l.Context()), lockclient.ErrClosed) {
			t.Fatalf("lock %s after Close: cause %v", l.Resource(), context.Cause(l.Context()))
		}
		if _, err := watcher.Holder(t.Context(), l.Resource()); !errors.Is(err, lockclient.ErrNotHeld) {
			t.Fatalf("Holder(%s) after Close = %v, want ErrNotHeld (lease revoked)", l.Resource(), err)
		}
	}
	if _, err := c.TryAcquire(t.Context(), "a"); !errors.Is(err, lockclient.ErrClosed) {
		t.Fatalf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestClient_manyLocks_noGoroutinePerLock holds 1,000 locks, half of them with
// manual renewal, and checks the goroutine count does not grow with them.
func TestClient_manyLocks_noGoroutinePerLock(t *testing.T) {
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t), lockclient.WithTTL(30*time.Second))
	mustAcquire(t, c, "warmup") // session and its goroutine started
	settle := func() int {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	before := settle()
	const n = 1000
	locks := make([]*lockclient.Lock, 0, n)
	for i := range n {
		var opts []lockclient.LockOption
		if i%2 == 1 {
			opts = append(opts, lockclient.WithManualRenewal(time.Minute))
		}
		locks = append(locks, mustAcquire(t, c, fmt.Sprintf("job-%d", i), opts...))
	}
	// Done and Context of every lock in use, as a worker would.
	for _, l := range locks {
		_ = l.Done()
		_ = l.Context().Done()
	}
	if grown := settle() - before; grown >= n/10 {
		t.Fatalf("goroutines grew by %d while holding %d locks", grown, n)
	}
	list, err := c.List(t.Context())
	if err != nil || len(list) != n+1 {
		t.Fatalf("List = %d locks, %v; want %d", len(list), err, n+1)
	}
}

func TestClient_identityRoundTrip(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	id := `billing "eu" 1\ ü`
	c := newClient(t, srv.Client(t), lockclient.WithIdentity(id))
	l := mustAcquire(t, c, "job")
	info, err := c.Holder(t.Context(), "job")
	if err != nil || info.ClientID != id || info.Token != l.Token() || c.ID() != id {
		t.Fatalf("Holder = %+v, %v; want client ID %q", info, err, id)
	}
}

// TestClient_NextToken: above every token granted before, not above the next grant.
func TestClient_NextToken(t *testing.T) {
	srv := locktest.Start(t)
	c := newClient(t, srv.Client(t))
	l := mustAcquire(t, c, "before")
	s := mustAcquireSet(t, c, []string{"s1", "s2"})
	next, err := c.NextToken(t.Context())
	if err != nil || next <= s.Token() || next <= l.Token() {
		t.Fatalf("NextToken = %d, %v; want above %d and %d", next, err, l.Token(), s.Token())
	}
	after := mustAcquire(t, c, "after")
	if after.Token() != next {
		t.Fatalf("the next grant's token %d, NextToken said %d (no other write in between)", after.Token(), next)
	}
	c.Close()
	if _, err := c.NextToken(t.Context()); !errors.Is(err, lockclient.ErrClosed) {
		t.Fatalf("NextToken after Close = %v, want ErrClosed", err)
	}
}
