package lockmetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestMetrics_leader: the is-leader gauge is 1 during a term and 0 after,
// terms are counted begun and ended by cause (a first term whose fn returned,
// a second resigned); a candidate that never led counts nothing.
func TestMetrics_leader(t *testing.T) {
	srv := locktest.Start(t)
	m, reg := newMetrics(t)
	c := newClient(t, srv, lockclient.WithObserver(m))
	lctx, resign := context.WithCancel(t.Context())
	terms := 0
	err := c.Lead(lctx, "scheduler", func(term *lockclient.Lock) error {
		want := "# HELP fencegate_leader 1 while this process holds a term of Lead for the name, else 0.\n# TYPE fencegate_leader gauge\nfencegate_leader{name=\"scheduler\"} 1\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fencegate_leader"); err != nil {
			t.Errorf("during the term: %v", err)
		}
		if terms++; terms == 2 {
			resign()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead = %v, want context.Canceled", err)
	}
	held, err := c.Acquire(t.Context(), "scheduler") // another holder: the next candidate waits
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	other, otherReg := newMetrics(t)
	o := newClient(t, srv, lockclient.WithObserver(other))
	if err := o.Lead(ctx, "scheduler", func(*lockclient.Lock) error { return nil }); err == nil {
		t.Fatal("Lead with an ended ctx returned nil")
	}
	want := `
# HELP fencegate_leader 1 while this process holds a term of Lead for the name, else 0.
# TYPE fencegate_leader gauge
fencegate_leader{name="scheduler"} 0
# HELP fencegate_leader_terms_begun_total Terms of Lead begun, by name.
# TYPE fencegate_leader_terms_begun_total counter
fencegate_leader_terms_begun_total{name="scheduler"} 2
# HELP fencegate_leader_terms_ended_total Terms of Lead ended, by name and cause: resigned, returned, failed, panicked, lease_expired, not_renewed, key_deleted, max_hold, closed.
# TYPE fencegate_leader_terms_ended_total counter
fencegate_leader_terms_ended_total{cause="resigned",name="scheduler"} 1
fencegate_leader_terms_ended_total{cause="returned",name="scheduler"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fencegate_leader", "fencegate_leader_terms_begun_total", "fencegate_leader_terms_ended_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(otherReg, "fencegate_leader", "fencegate_leader_terms_begun_total", "fencegate_leader_terms_ended_total"); err != nil || n != 0 {
		t.Fatalf("never-leader has %d leader series (%v), want none", n, err)
	}
}

// TestMetrics_retries: each request an overloaded etcd refused and the Client
// sent again, and each interval waited on an unreachable etcd, is counted
// under its op.
func TestMetrics_retries(t *testing.T) {
	m, reg := newMetrics(t)
	var ro lockclient.Observer = m
	ro.Retried("acquire", rpctypes.ErrTooManyRequests)
	ro.Retried("acquire", rpctypes.ErrTooManyRequests)
	ro.Retried("grant", rpctypes.ErrTooManyRequests)
	ro.Retried("connect", errors.New("connection refused"))
	want := `
# HELP fencegate_etcd_retries_total Requests an overloaded etcd refused before acting on them (too many requests), sent again, by op; op connect: intervals a call waited on an etcd it could not reach.
# TYPE fencegate_etcd_retries_total counter
fencegate_etcd_retries_total{op="acquire"} 2
fencegate_etcd_retries_total{op="connect"} 1
fencegate_etcd_retries_total{op="grant"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fencegate_etcd_retries_total"); err != nil {
		t.Fatal(err)
	}
}
