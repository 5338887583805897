package lockclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLock_set_keyDeleted: a key of the set deleted by someone else (an operator's
// release) ends the whole set when Renew finds it, and the client deletes the
// set's other keys, so their names pass on at once.
func TestLock_set_keyDeleted(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	a := newClient(t, cli, lockclient.WithTTL(30*time.Second))
	b := newClient(t, srv.Client(t))
	s := mustAcquireSet(t, a, []string{"x", "y", "z"})
	if err := b.Release(t.Context(), "y", s.Token()); err != nil {
		t.Fatalf("operator release of y: %v", err)
	}
	err := s.Renew(t.Context())
	if !lostAt(err, s) || !isClosed(s.Done()) {
		t.Fatalf("Renew after a member's key was deleted = %v, want fence.ErrLost for token %d", err, s.Token())
	}
	if err := fence.CheckGrant(s); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("CheckGrant(lost set) = %v", err)
	}
	// x and z go within the session's life: Acquire returns long before 30 s.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	next, err := b.AcquireSet(ctx, []string{"x", "z"})
	if err != nil || next.Token() <= s.Token() {
		t.Fatalf("x and z after the set's loss: %v, %v", next, err)
	}
	if err := s.Release(t.Context()); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("Release of the lost set = %v, want ErrLost", err)
	}
}

// TestLock_set_manualRenewal_expires: a set taken WithManualRenewal and not
// renewed within its lease is lost as a whole, and all its keys are deleted.
func TestLock_set_manualRenewal_expires(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t), lockclient.WithTTL(30*time.Second))
	b := newClient(t, srv.Client(t))
	kept := mustAcquire(t, a, "kept") // on the session, renewed by it
	s := mustAcquireSet(t, a, []string{"p", "q"}, lockclient.WithManualRenewal(testTTL))
	if err := s.Renew(t.Context()); err != nil {
		t.Fatalf("Renew of a live manual set: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	next, err := b.AcquireSet(ctx, []string{"q", "p"})
	if err != nil || next.Token() <= s.Token() {
		t.Fatalf("p and q after the unrenewed set: %v, %v", next, err)
	}
	waitClosed(t, s.Done(), "the unrenewed set's Done")
	if cause := context.Cause(s.Context()); !lostAt(cause, s) {
		t.Fatalf("cause = %v, want fence.ErrLost for token %d", cause, s.Token())
	}
	if isClosed(kept.Done()) {
		t.Fatal("the session ended with one manual set")
	}
}

// TestLock_set_close: closing the Client ends its sets with ErrClosed and frees
// every name.
func TestLock_set_close(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t))
	b := newClient(t, srv.Client(t))
	s := mustAcquireSet(t, a, []string{"k", "l"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !isClosed(s.Done()) || !errors.Is(context.Cause(s.Context()), lockclient.ErrClosed) {
		t.Fatalf("after Close: cause %v", context.Cause(s.Context()))
	}
	if _, err := b.TryAcquireSet(t.Context(), []string{"k", "l"}); err != nil {
		t.Fatalf("k and l after Close: %v", err)
	}
}

// TestClient_Release_setMember: the Client's Release of one name of a set it
// holds, with the set's token, releases the whole set.
func TestClient_Release_setMember(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	a := newClient(t, srv.Client(t))
	s := mustAcquireSet(t, a, []string{"u", "v"})
	if err := a.Release(t.Context(), "v", s.Token()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(s.Context()), lockclient.ErrReleased) {
		t.Fatalf("cause %v, want ErrReleased", context.Cause(s.Context()))
	}
	if _, err := a.TryAcquireSet(t.Context(), []string{"u", "v"}); err != nil {
		t.Fatalf("u and v after the release: %v", err)
	}
}

// TestClient_TryAcquireSet_leaseNotFound: an acquire, single or set, whose
// session lease etcd no longer has ends the session at once (the locks of that
// session end before the call returns), however long the renewal interval.
func TestClient_TryAcquireSet_leaseNotFound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		acquire func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error)
		wait    bool
	}{
		{"single try", func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error) {
			return c.TryAcquire(ctx, "b")
		}, false},
		{"set try", func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error) {
			return c.TryAcquireSet(ctx, []string{"b", "c"})
		}, false},
		{"set wait", func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error) {
			return c.AcquireSet(ctx, []string{"b", "c"})
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := shared.Cluster(t)
			cli := srv.Client(t)
			c := newClient(t, cli, lockclient.WithTTL(60*time.Second))
			held := mustAcquire(t, c, "a")
			resp, err := cli.Get(t.Context(), defaultPrefix+"a")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("Get the held key: %v", err)
			}
			if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			l, err := tt.acquire(t.Context(), c)
			if tt.wait {
				if err != nil || l.Token() <= held.Token() {
					t.Fatalf("waiting acquire after the lease was revoked = %v, %v; want a new lock", l, err)
				}
			} else if !errors.Is(err, lockclient.ErrSessionLost) {
				t.Fatalf("try after the lease was revoked = %v, want ErrSessionLost", err)
			}
			if !isClosed(held.Done()) {
				t.Fatal("the session's lock still open after etcd refused its lease: the session was not ended")
			}
			if cause := context.Cause(held.Context()); !errors.Is(cause, lockclient.ErrSessionLost) {
				t.Fatalf("held lock's cause = %v, want ErrSessionLost", cause)
			}
		})
	}
}
