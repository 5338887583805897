package lockclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// endedByMaxHold waits for l to end and checks that its cause is the max hold.
func endedByMaxHold(t *testing.T, l *lockclient.Lock) {
	t.Helper()
	waitClosed(t, l.Done(), "max-hold lock's Done")
	cause := context.Cause(l.Context())
	if !errors.Is(cause, lockclient.ErrMaxHold) || !errors.Is(cause, fence.ErrLost) {
		t.Fatalf("cause = %v, want ErrMaxHold and fence.ErrLost", cause)
	}
	if err := fence.CheckGrant(l); !errors.Is(err, fence.ErrLost) {
		t.Fatalf("CheckGrant after max hold = %v, want fence.ErrLost", err)
	}
}

// TestLock_WithMaxHold_endsRenewedGrant: a lock, a manually renewed lock and a
// permit end at their max hold while their session (and renewals) stay good:
// a lock without the option on the same session lives on, and the freed keys
// are granted at once to others with higher tokens.
func TestLock_WithMaxHold_endsRenewedGrant(t *testing.T) {
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL))
	other := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL))
	keeper := mustAcquire(t, c, "keeper")
	capped := mustAcquire(t, c, "capped", lockclient.WithMaxHold(testTTL))
	manual := mustAcquire(t, c, "manual", lockclient.WithManualRenewal(testTTL), lockclient.WithMaxHold(2*testTTL))
	permit, err := c.AcquirePermit(t.Context(), "pool", 1, lockclient.WithMaxHold(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	// Renew the manual lock until it ends: every renewal succeeds until then.
	for !isClosed(manual.Done()) {
		if err := manual.Renew(t.Context()); err != nil && !errors.Is(err, lockclient.ErrMaxHold) {
			t.Fatalf("Renew before the max hold: %v", err)
		}
		select {
		case <-manual.Done():
		case <-time.After(testTTL / 4):
		}
	}
	for _, l := range []*lockclient.Lock{capped, manual, permit} {
		endedByMaxHold(t, l)
		if err := l.Renew(t.Context()); !errors.Is(err, lockclient.ErrMaxHold) {
			t.Fatalf("Renew after max hold = %v", err)
		}
	}
	if err := keeper.Renew(t.Context()); err != nil || isClosed(keeper.Done()) {
		t.Fatalf("the session's other lock ended with the max-hold ones: %v", err)
	}
	for _, l := range []*lockclient.Lock{capped, manual} {
		next, err := other.TryAcquire(t.Context(), l.Resource())
		if err != nil || next.Token() <= l.Token() {
			t.Fatalf("TryAcquire(%q) after its max hold = %v, %v", l.Resource(), next, err)
		}
	}
	next, err := other.TryAcquirePermit(t.Context(), "pool", 1)
	if err != nil || next.Token() <= permit.Token() {
		t.Fatalf("TryAcquirePermit after the max hold = %v, %v", next, err)
	}
}

// TestClient_Lead_maxHold: each term ends at its max hold, and Lead campaigns
// again: a new term with a higher token.
func TestClient_Lead_maxHold(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var tokens []fence.Token
	err := c.Lead(ctx, "scheduler", func(term *lockclient.Lock) error {
		tokens = append(tokens, term.Token())
		if len(tokens) == 2 {
			cancel() // the second term proves Lead went on; resign it
			return nil
		}
		<-term.Done()
		if cause := context.Cause(term.Context()); !errors.Is(cause, lockclient.ErrMaxHold) {
			t.Errorf("term %d ended with %v, want ErrMaxHold", term.Token(), cause)
		}
		return nil
	}, lockclient.WithMaxHold(testTTL))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v, want context.Canceled", err)
	}
	if len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Fatalf("terms = %v, want two with rising tokens", tokens)
	}
}

func TestClient_WithMaxHold_badInput(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t), lockclient.WithTTL(3*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // any I/O would fail with ctx's error
	tests := []struct {
		name string
		opts []lockclient.LockOption
		msg  string
	}{
		{"zero", []lockclient.LockOption{lockclient.WithMaxHold(0)}, "not positive"},
		{"negative", []lockclient.LockOption{lockclient.WithMaxHold(-time.Second)}, "not positive"},
		{"under the session TTL", []lockclient.LockOption{lockclient.WithMaxHold(2 * time.Second)}, "under the lock's lease 3s"},
		{"under a manual lease", []lockclient.LockOption{lockclient.WithManualRenewal(5 * time.Second), lockclient.WithMaxHold(4 * time.Second)}, "under the lock's lease 5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := map[string]error{}
			_, calls["Acquire"] = c.Acquire(ctx, "job", tt.opts...)
			_, calls["TryAcquire"] = c.TryAcquire(ctx, "job", tt.opts...)
			_, calls["AcquirePermit"] = c.AcquirePermit(ctx, "jobs", 2, tt.opts...)
			calls["Lead"] = c.Lead(ctx, "leader", func(*lockclient.Lock) error { return nil }, tt.opts...)
			for call, err := range calls {
				if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
					t.Errorf("%s = %v; want fence.ErrInvalidArgument mentioning %q", call, err, tt.msg)
				}
			}
		})
	}
}
