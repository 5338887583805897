package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// revokeSession revokes, from outside, the session lease under which name is
// held: etcd deletes its keys, and the holder's next keepalive finds it gone.
func revokeSession(t *testing.T, admin *clientv3.Client, name string) {
	t.Helper()
	resp, err := admin.Get(t.Context(), defaultPrefix+name)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("Get %q: %v, %d keys", name, err, len(resp.Kvs))
	}
	if _, err := admin.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
}

// TestClient_sessionLost_nextAcquire: a lost session ends its locks one-way
// (cause matching ErrSessionLost and fence.ErrLost), and the next Acquire of the
// same Client starts a new session.
func TestClient_sessionLost_nextAcquire(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	admin := srv.Client(t)
	rec := &recorder{}
	c := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL), lockclient.WithObserver(rec))
	a := mustAcquire(t, c, "a")
	m := mustAcquire(t, c, "m", lockclient.WithManualRenewal(0))
	revokeSession(t, admin, "a")

	for _, l := range []*lockclient.Lock{a, m} {
		waitClosed(t, l.Done(), "Done of a lock of the revoked session")
		cause := context.Cause(l.Context())
		if !errors.Is(cause, lockclient.ErrSessionLost) || !errors.Is(cause, fence.ErrLost) {
			t.Errorf("%s: cause %v, want ErrSessionLost and fence.ErrLost", l.Resource(), cause)
		}
		if err := l.Renew(t.Context()); !errors.Is(err, lockclient.ErrSessionLost) {
			t.Errorf("%s: Renew after the loss = %v, want ErrSessionLost", l.Resource(), err)
		}
	}
	// The Client goes on, but renewed locks are never revived: a new Acquire is
	// a new lock.
	b := mustAcquire(t, c, "a")
	if b.Token() <= a.Token() {
		t.Errorf("new token %d is not above the lost one %d", b.Token(), a.Token())
	}
	if !isClosed(a.Done()) {
		t.Error("the lost lock came back")
	}
	started, lost := rec.sessionCounts()
	if started != 2 || len(lost) != 1 || lost[0] != 2 {
		t.Errorf("sessions started %d, lost %v; want 2 and [2]", started, lost)
	}
}

// TestClient_sessionLost_waitingAcquireGoesOn: an Acquire waiting for a holder
// when its session is lost goes on under a new session and gets the lock when
// the holder releases it.
func TestClient_sessionLost_waitingAcquireGoesOn(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	admin := srv.Client(t)
	holder := newClient(t, srv.Client(t))
	c := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL))
	h := mustAcquire(t, holder, "x")
	mustAcquire(t, c, "mine") // c's session, to be revoked

	got := make(chan error, 1)
	var l *lockclient.Lock
	go func() {
		var err error
		l, err = c.Acquire(t.Context(), "x")
		got <- err
	}()
	// The loss is seen by c's next keepalive, or by the Acquire's next Txn.
	revokeSession(t, admin, "mine")
	if err := h.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Acquire across a lost session: %v", err)
	}
	if l.Token() <= h.Token() {
		t.Errorf("token %d is not above the previous holder's %d", l.Token(), h.Token())
	}
	info, err := holder.Holder(t.Context(), "x")
	if err != nil || info.Token != l.Token() {
		t.Fatalf("Holder = %+v, %v; want token %d", info, err, l.Token())
	}
}

// TestClient_Lead_leaseRevoked revokes the leading Client's session lease in
// etcd, as an expiry would but while the Client runs: the term's key goes with
// the lease, and its watch sees the DELETE long before a keepalive (a TTL of
// 30 s) finds the lease gone. The term still ends as the lease's loss
// (lease_expired, ErrSessionLost), never as key_deleted, and Lead leads again.
// Code without the lease check in keyGone fails this every time.
func TestClient_Lead_leaseRevoked(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	obs := &termRecorder{}
	c := newClient(t, srv.Client(t), lockclient.WithTTL(30*time.Second), lockclient.WithObserver(obs))
	terms := make(chan *lockclient.Lock, 4)
	leadAsync(t.Context(), c, "scheduler", terms)
	first := nextTerm(t, terms, "first")
	revokeSession(t, srv.Client(t), "scheduler")
	waitClosed(t, first.Done(), "term after its lease was revoked")
	if cause := context.Cause(first.Context()); !lostAt(cause, first) || !errors.Is(cause, lockclient.ErrSessionLost) {
		t.Fatalf("term ended with %v, want fence.ErrLost and ErrSessionLost (its lease is gone)", cause)
	}
	second := nextTerm(t, terms, "after the loss")
	want := []string{fmt.Sprintf("begun %d", first.Token()), fmt.Sprintf("ended %d lease_expired", first.Token()), fmt.Sprintf("begun %d", second.Token())}
	if got := obs.events(); !slices.Equal(got, want) {
		t.Fatalf("terms %q, want %q", got, want)
	}
}
