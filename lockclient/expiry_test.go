package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

func TestLock_manualRenewal_expires(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	// A long session TTL: only the lock's own lease can explain its release.
	a := newClient(t, srv.Client(t), lockclient.WithTTL(30*time.Second))
	b := newClient(t, srv.Client(t))

	kept := mustAcquire(t, a, "kept") // on the session, renewed by it
	stuck := mustAcquire(t, a, "report", lockclient.WithManualRenewal(testTTL))
	got := make(chan *lockclient.Lock, 1)
	go func() {
		l, err := b.Acquire(t.Context(), "report")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitClosed(t, stuck.Done(), "the unrenewed lock's Done")
	if cause := context.Cause(stuck.Context()); !lostAt(cause, stuck) {
		t.Fatalf("cause = %v, want fence.ErrLost for token %d", cause, stuck.Token())
	}
	lb := <-got
	if lb == nil || lb.Token() <= stuck.Token() {
		t.Fatalf("waiter got %v after token %d", lb, stuck.Token())
	}
	if isClosed(kept.Done()) {
		t.Fatal("the session ended with one manual lock")
	}
	if err := stuck.Renew(t.Context()); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Renew after expiry = %v, want ErrLost", err)
	}
	if err := stuck.Release(t.Context()); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Release after expiry = %v, want ErrLost", err)
	}
	// The session still grants.
	if _, err := a.TryAcquire(t.Context(), "other"); err != nil {
		t.Fatalf("TryAcquire on the live session: %v", err)
	}
}

func TestLock_manualRenewal_renewKeepsIt(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t), lockclient.WithTTL(30*time.Second))
	b := newClient(t, srv.Client(t))
	l := mustAcquire(t, a, "report", lockclient.WithManualRenewal(3*time.Second))
	// Renew across several lease durations; the lock must stay.
	for range 14 {
		time.Sleep(500 * time.Millisecond)
		if err := l.Renew(t.Context()); err != nil {
			t.Fatalf("Renew: %v", err)
		}
	}
	if _, err := b.TryAcquire(t.Context(), "report"); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire of a renewed lock = %v, want ErrHeld", err)
	}
	if isClosed(l.Done()) {
		t.Fatal("renewed lock ended")
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestClient_abandoned leaves a client's session to expire: its etcd connection
// closes without Close or Release, so no keepalive reaches etcd again.
func TestClient_abandoned(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	a := newClient(t, cli, lockclient.WithTTL(testTTL))
	b := newClient(t, srv.Client(t))
	la := mustAcquire(t, a, "account-9")
	mustAcquire(t, a, "account-10", lockclient.WithManualRenewal(0))
	cli.Close()

	lb := mustAcquire(t, b, "account-9") // waits for etcd to expire a's lease
	if lb.Token() <= la.Token() {
		t.Fatalf("new holder's token %d is not above %d", lb.Token(), la.Token())
	}
	waitClosed(t, la.Done(), "abandoned lock's Done")
	if cause := context.Cause(la.Context()); !lostAt(cause, la) || !errors.Is(cause, lockclient.ErrSessionLost) {
		t.Fatalf("cause = %v, want fence.ErrLost for its token matching ErrSessionLost", cause)
	}
	if err := fence.CheckGrant(la); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("CheckGrant of the lost lock = %v", err)
	}
	if l, err := b.Holder(t.Context(), "account-10"); !errors.Is(err, lockclient.ErrNotHeld) {
		t.Fatalf("the lost session's other lock is still held: %+v, %v", l, err)
	}
}

// TestLock_Renew_detectsLoss: a key deleted behind the holder's back (released by
// token elsewhere) is found by the next Renew, which ends the lock as lost.
func TestLock_Renew_detectsLoss(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t))
	admin := newClient(t, srv.Client(t))
	kept := mustAcquire(t, a, "kept") // on the session, renewed by it
	l := mustAcquire(t, a, "job", lockclient.WithManualRenewal(0))
	if err := l.Renew(t.Context()); err != nil {
		t.Fatalf("Renew of a held lock: %v", err)
	}
	if err := admin.Release(t.Context(), "job", l.Token()); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(t.Context()); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Renew after the key was deleted = %v, want ErrLost", err)
	}
	if !isClosed(l.Done()) {
		t.Fatal("Done open after Renew found the lock lost")
	}
	if isClosed(kept.Done()) {
		t.Fatal("one lost lock ended the session")
	}
}

// TestLock_Lease checks the lease a Lock reports to the adapters (fence.Leased),
// which bound a frozen holder's idle transaction by it.
func TestLock_Lease(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t), lockclient.WithTTL(7*time.Second))
	tests := []struct {
		name string
		opts []lockclient.LockOption
		want time.Duration
	}{
		{"session", nil, 7 * time.Second},
		{"manual, session's lease", []lockclient.LockOption{lockclient.WithManualRenewal(0)}, 7 * time.Second},
		{"manual, own lease", []lockclient.LockOption{lockclient.WithManualRenewal(3 * time.Second)}, 3 * time.Second},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := mustAcquire(t, c, fmt.Sprintf("lease-%d", i), tt.opts...)
			if got := l.Lease(); got != tt.want {
				t.Fatalf("Lease() = %v, want %v", got, tt.want)
			}
			ck, err := grant.Check(l)
			if err != nil {
				t.Fatal(err)
			}
			if got := ck.IdleTimeout(0); got != tt.want {
				t.Fatalf("IdleTimeout(0) of the checked lock = %v, want the lock's lease %v", got, tt.want)
			}
		})
	}
	set, err := c.AcquireSet(t.Context(), []string{"lease-a", "lease-b"}, lockclient.WithManualRenewal(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Lease(); got != 4*time.Second {
		t.Fatalf("set's Lease() = %v, want 4s", got)
	}
	var nilLock *lockclient.Lock
	if got := nilLock.Lease(); got != 0 {
		t.Fatalf("nil Lock's Lease() = %v, want 0", got)
	}
}

// TestClient_TTL_raisedByEtcd asks a 1 s TTL of an etcd with its default
// timing, which grants 2 s: the Client works on the granted lease, counts its
// deadline from it, reports it as the Lock's Lease and logs the raise.
func TestClient_TTL_raisedByEtcd(t *testing.T) {
	t.Parallel()
	srv := locktest.StartConfig(t, locktest.Config{Heartbeat: 100 * time.Millisecond, ElectionTimeout: time.Second})
	logs := &logBuffer{}
	c := newClient(t, srv.Client(t), lockclient.WithTTL(time.Second), lockclient.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	sent := time.Now()
	l := mustAcquire(t, c, "job")
	if got := l.Lease(); got != 2*time.Second {
		t.Fatalf("Lease() = %v, want the 2 s etcd granted", got)
	}
	if left := lockclient.SessionDeadline(c).Sub(sent); left <= time.Second {
		t.Fatalf("session deadline %v after the grant was sent, want more than the 1 s asked", left)
	}
	if !logs.contains(`"msg":"etcd granted a longer session lease than asked"`) || !logs.contains(`"granted":2000000000`) {
		t.Fatalf("raise not logged: %v", logs.records(t))
	}
	// It outlives the TTL asked, renewed on the granted lease.
	time.Sleep(3 * time.Second)
	if err := l.Renew(t.Context()); err != nil || isClosed(l.Done()) {
		t.Fatalf("lock after 3 s: Renew %v, Done closed %v", err, isClosed(l.Done()))
	}
}

// endBlocker is an Observer whose Ended holds the end of a lock lost with
// ErrNotRenewed until release is closed: the moment between a lock leaving
// the registry and its Done closing, made as long as a test needs.
type endBlocker struct {
	recorder
	entered, release chan struct{}
}

func (o *endBlocker) Ended(name string, token fence.Token, held time.Duration, cause error) {
	if errors.Is(cause, lockclient.ErrNotRenewed) {
		close(o.entered)
		<-o.release
	}
	o.recorder.Ended(name, token, held, cause)
}

// TestLock_endingIsNotHeld: a call on a lock that its clock is ending (the
// lock unregistered, its Done not closed yet) reports the loss, never
// success: Renew must not say the lock is held, nor Release that it released
// it. The end is held open by the Observer, which runs before Done closes.
func TestLock_endingIsNotHeld(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	tests := []struct {
		name string
		call func(l *lockclient.Lock) error
	}{
		{"Renew", func(l *lockclient.Lock) error { return l.Renew(t.Context()) }},
		{"Release", func(l *lockclient.Lock) error { return l.Release(t.Context()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := &endBlocker{entered: make(chan struct{}), release: make(chan struct{})}
			c := newClient(t, srv.Client(t), lockclient.WithTTL(30*time.Second), lockclient.WithObserver(obs))
			l := mustAcquire(t, c, "report", lockclient.WithManualRenewal(testTTL))
			<-obs.entered // the clock has unregistered l and is ending it
			errc := make(chan error, 1)
			go func() { errc <- tt.call(l) }()
			// Room for a call that does not wait for the end to answer first.
			time.Sleep(300 * time.Millisecond)
			close(obs.release)
			if err := <-errc; !errors.Is(err, lockclient.ErrNotRenewed) || !errors.Is(err, fence.ErrLost) {
				t.Fatalf("%s while the lock ends = %v, want fence.ErrLost and ErrNotRenewed", tt.name, err)
			}
		})
	}
}
