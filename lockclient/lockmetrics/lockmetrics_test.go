package lockmetrics_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/lockmetrics"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

func newMetrics(t *testing.T) (*lockmetrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := lockmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func newClient(t *testing.T, srv *locktest.Cluster, opts ...lockclient.Option) *lockclient.Client {
	t.Helper()
	c, err := lockclient.New(srv.Client(t), append([]lockclient.Option{lockclient.WithTTL(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// value is the value of the gauge or counter name, which has no labels.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// histCount is the sample count of the histogram family name.
func histCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestMetrics_lockclient(t *testing.T) {
	srv := locktest.Start(t)
	m, reg := newMetrics(t)
	c := newClient(t, srv, lockclient.WithObserver(m))
	other := newClient(t, srv)
	ctx := t.Context()

	a, err := c.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "held"); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire(held): %v", err)
	}
	if got := value(t, reg, "fencegate_locks_held"); got != 1 {
		t.Errorf("locks held = %v, want 1", got)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Acquire(cctx, "b"); err == nil {
		t.Fatal("Acquire with a cancelled context succeeded")
	}
	manual, err := c.Acquire(ctx, "m", lockclient.WithManualRenewal(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	<-manual.Done() // not renewed: lost by the client's own deadline
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	want := `
# HELP fencegate_lock_acquisitions_total Acquire and TryAcquire calls by result: granted, held_by_other, error.
# TYPE fencegate_lock_acquisitions_total counter
fencegate_lock_acquisitions_total{result="error"} 1
fencegate_lock_acquisitions_total{result="granted"} 2
fencegate_lock_acquisitions_total{result="held_by_other"} 1
# HELP fencegate_lock_losses_total Locks lost by cause: lease_expired (session lease ran out), not_renewed (manual renewal missed), key_deleted (key deleted by someone else), max_hold (WithMaxHold reached).
# TYPE fencegate_lock_losses_total counter
fencegate_lock_losses_total{cause="key_deleted"} 0
fencegate_lock_losses_total{cause="lease_expired"} 0
fencegate_lock_losses_total{cause="max_hold"} 0
fencegate_lock_losses_total{cause="not_renewed"} 1
# HELP fencegate_locks_held Locks held now.
# TYPE fencegate_locks_held gauge
fencegate_locks_held 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fencegate_lock_acquisitions_total", "fencegate_lock_losses_total", "fencegate_locks_held"); err != nil {
		t.Error(err)
	}
	if n := histCount(t, reg, "fencegate_lock_wait_seconds"); n != 2 {
		t.Errorf("wait samples = %d, want 2 (granted acquisitions)", n)
	}
	if n := histCount(t, reg, "fencegate_lock_hold_seconds"); n != 2 {
		t.Errorf("hold samples = %d, want 2 (ended locks)", n)
	}
	// The manual lock lived its 2 s lease, past the 2/3 s renewal interval.
	if n := histCount(t, reg, "fencegate_session_keepalive_seconds"); n == 0 {
		t.Error("no keepalive round trip observed")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestMetrics_sessionLost(t *testing.T) {
	cl := locktest.StartCluster(t, 1)
	m, reg := newMetrics(t)
	obs := sessionReports{Metrics: m, lost: make(chan struct{}, 1)}
	c, err := lockclient.New(cl.Client(t), lockclient.WithTTL(2*time.Second), lockclient.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := c.Acquire(t.Context(), "s")
	if err != nil {
		t.Fatal(err)
	}
	cl.Stop(0)
	<-l.Done()
	<-obs.lost // the session's loss is reported just after its locks end
	want := `
# HELP fencegate_lock_losses_total Locks lost by cause: lease_expired (session lease ran out), not_renewed (manual renewal missed), key_deleted (key deleted by someone else), max_hold (WithMaxHold reached).
# TYPE fencegate_lock_losses_total counter
fencegate_lock_losses_total{cause="key_deleted"} 0
fencegate_lock_losses_total{cause="lease_expired"} 1
fencegate_lock_losses_total{cause="max_hold"} 0
fencegate_lock_losses_total{cause="not_renewed"} 0
# HELP fencegate_locks_held Locks held now.
# TYPE fencegate_locks_held gauge
fencegate_locks_held 0
# HELP fencegate_sessions_lost_total Sessions lost: the lease ran out without a confirmed renewal, or etcd no longer had it.
# TYPE fencegate_sessions_lost_total counter
fencegate_sessions_lost_total 1
# HELP fencegate_sessions_started_total Session leases granted: a Client's first, and each after a lost session.
# TYPE fencegate_sessions_started_total counter
fencegate_sessions_started_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fencegate_lock_losses_total", "fencegate_locks_held",
		"fencegate_sessions_lost_total", "fencegate_sessions_started_total"); err != nil {
		t.Error(err)
	}

	// The Client goes on under a second session once etcd is back.
	cl.Restart(0)
	if _, err := c.Acquire(t.Context(), "s"); err != nil {
		t.Fatalf("Acquire after the lost session: %v", err)
	}
	if got := value(t, reg, "fencegate_sessions_started_total"); got != 2 {
		t.Errorf("sessions started = %v, want 2", got)
	}
}

func TestMetrics_fencedWrites(t *testing.T) {
	m, reg := newMetrics(t)
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(t.Context(), db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	s, err := sqlfence.New(db, migrations.SQLite, sqlfence.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	noop := func(*sql.Tx) error { return nil }
	for _, tok := range []fence.Token{5, 6, 4, 3, 7} {
		s.Fenced(t.Context(), fence.NewGrant("r", tok), noop)
	}
	want := `
# HELP fencegate_fenced_writes_total Fenced writes by adapter and result: accepted, stale (refused, a higher token is stored), lost (refused, the lock is known lost), error.
# TYPE fencegate_fenced_writes_total counter
fencegate_fenced_writes_total{adapter="sqlfence",result="accepted"} 3
fencegate_fenced_writes_total{adapter="sqlfence",result="stale"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fencegate_fenced_writes_total"); err != nil {
		t.Error(err)
	}
}

func TestNew_badInput(t *testing.T) {
	reg := prometheus.NewRegistry()
	for name, tc := range map[string]struct {
		reg  prometheus.Registerer
		opts []lockmetrics.Option
	}{
		"nil registerer": {nil, nil},
		"nil option":     {reg, []lockmetrics.Option{nil}},
		"bad buckets":    {reg, []lockmetrics.Option{lockmetrics.WithBuckets([]float64{1, 1}, nil, nil)}},
	} {
		if _, err := lockmetrics.New(tc.reg, tc.opts...); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want fence.ErrInvalidArgument", name, err)
		}
	}
	if _, err := lockmetrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := lockmetrics.New(reg); err == nil {
		t.Error("registering twice with one registry succeeded")
	}
	// More Metrics on the same registry, told apart as Prometheus's wrappers do: by a
	// name prefix, or by a constant label every one of them carries.
	if _, err := lockmetrics.New(prometheus.WrapRegistererWithPrefix("other_", reg)); err != nil {
		t.Errorf("a second Metrics with a prefix: %v", err)
	}
	labelled := prometheus.NewRegistry()
	for _, svc := range []string{"billing", "ledger"} {
		if _, err := lockmetrics.New(prometheus.WrapRegistererWith(prometheus.Labels{"service": svc}, labelled)); err != nil {
			t.Errorf("Metrics with service=%s: %v", svc, err)
		}
	}
}

// sessionReports passes every report on to Metrics and tells the test when a
// session loss has been reported.
type sessionReports struct {
	*lockmetrics.Metrics
	lost chan struct{}
}

func (o sessionReports) Session(locks int, err error) {
	o.Metrics.Session(locks, err)
	if err != nil {
		select {
		case o.lost <- struct{}{}:
		default:
		}
	}
}
