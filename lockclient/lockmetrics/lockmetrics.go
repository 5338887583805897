// Package lockmetrics exports what lockclient Clients and the fencing adapters
// do as Prometheus metrics. It is a separate package so that the core packages
// do not depend on the Prometheus client.
//
// One Metrics serves any number of Clients and Stores:
//
//	m, err := lockmetrics.New(prometheus.DefaultRegisterer)
//	locks, err := lockclient.New(etcd, lockclient.WithObserver(m))
//	store, err := pgxfence.New(pool, pgxfence.WithObserver(m))
//
// The metrics (the namespace is "fencegate" unless WithNamespace says
// otherwise):
//
//	fencegate_lock_acquisitions_total{result}   counter: Acquire/TryAcquire calls by result: granted, held_by_other, error
//	fencegate_lock_wait_seconds                 histogram: time a granted Acquire/TryAcquire took (mostly the wait for the holder)
//	fencegate_lock_hold_seconds                 histogram: time from grant to release, close or loss
//	fencegate_locks_held                        gauge: locks held now
//	fencegate_lock_losses_total{cause}          counter: locks lost by cause: lease_expired, not_renewed, key_deleted
//	fencegate_session_keepalive_seconds         histogram: round trip of confirmed session lease renewals
//	fencegate_session_keepalive_failures_total  counter: session lease renewals that failed
//	fencegate_sessions_started_total            counter: session leases granted (a Client's first, and each after a lost one)
//	fencegate_sessions_lost_total               counter: sessions lost (their locks are counted in lock_losses_total{cause="lease_expired"})
//	fencegate_fenced_writes_total{adapter,result} counter: fenced writes by adapter (pgxfence, sqlfence) and result: accepted, stale, lost, error
//
// Lock names are not labels: they are unbounded. Every method is a few atomic
// adds; there is no goroutine.
package lockmetrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// ErrInvalidOption means an option to New is unusable.
var ErrInvalidOption = errors.New("lockmetrics: invalid option")

// Metrics implements lockclient.SessionObserver and fence.WriteObserver by updating
// Prometheus collectors. It is safe for concurrent use.
type Metrics struct {
	acquisitions *prometheus.CounterVec
	acqByResult  [4]prometheus.Counter // indexed by lockclient.AcquireResult
	wait         prometheus.Histogram
	hold         prometheus.Histogram
	held         prometheus.Gauge
	losses       *prometheus.CounterVec
	lossByCause  [6]prometheus.Counter // indexed by lockclient.EndReason
	keepalive    prometheus.Histogram
	kaFailures   prometheus.Counter
	started      prometheus.Counter
	lost         prometheus.Counter
	writes       *prometheus.CounterVec
}

var (
	_ lockclient.SessionObserver = (*Metrics)(nil)
	_ fence.WriteObserver        = (*Metrics)(nil)
)

// Option configures New.
type Option func(*config) error

type config struct {
	namespace   string
	waitBuckets []float64
	holdBuckets []float64
	keepBuckets []float64
	constLabels prometheus.Labels
}

// WithNamespace sets the metric name prefix (default "fencegate"). It must be
// a valid Prometheus name: letters, digits and underscores, not starting with a
// digit.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		if !validName(ns) {
			return fmt.Errorf("%w: namespace %q is not a valid metric name", ErrInvalidOption, ns)
		}
		c.namespace = ns
		return nil
	}
}

// WithConstLabels adds labels with fixed values to every metric, such as the
// service name when several share a registry.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) error {
		for k := range l {
			if !validName(k) {
				return fmt.Errorf("%w: label name %q is not valid", ErrInvalidOption, k)
			}
		}
		c.constLabels = l
		return nil
	}
}

// WithBuckets sets the histogram buckets, in seconds, of the wait, hold and
// keepalive histograms; a nil slice keeps that histogram's default. Each must
// be strictly increasing.
func WithBuckets(wait, hold, keepalive []float64) Option {
	return func(c *config) error {
		for _, b := range [][]float64{wait, hold, keepalive} {
			for i := 1; i < len(b); i++ {
				if b[i] <= b[i-1] {
					return fmt.Errorf("%w: buckets %v are not strictly increasing", ErrInvalidOption, b)
				}
			}
		}
		if wait != nil {
			c.waitBuckets = wait
		}
		if hold != nil {
			c.holdBuckets = hold
		}
		if keepalive != nil {
			c.keepBuckets = keepalive
		}
		return nil
	}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// New returns Metrics whose collectors are registered with reg. It returns
// ErrInvalidOption for an unusable option or a nil reg, and reg's error when a
// collector of the same name is already registered.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil registerer", ErrInvalidOption)
	}
	c := config{
		namespace:   "fencegate",
		waitBuckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
		holdBuckets: []float64{.01, .05, .1, .5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600},
		keepBuckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	ns, cl := c.namespace, c.constLabels
	m := &Metrics{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lock_acquisitions_total", ConstLabels: cl,
			Help: "Acquire and TryAcquire calls by result: granted, held_by_other, error."}, []string{"result"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "lock_wait_seconds", ConstLabels: cl, Buckets: c.waitBuckets,
			Help: "Time a granted Acquire or TryAcquire took, mostly waiting for the previous holder."}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "lock_hold_seconds", ConstLabels: cl, Buckets: c.holdBuckets,
			Help: "Time locks were held, from grant to release, close or loss."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "locks_held", ConstLabels: cl,
			Help: "Locks held now."}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lock_losses_total", ConstLabels: cl,
			Help: "Locks lost by cause: lease_expired (session lease ran out), not_renewed (manual renewal missed), key_deleted (key deleted by someone else)."}, []string{"cause"}),
		keepalive: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "session_keepalive_seconds", ConstLabels: cl, Buckets: c.keepBuckets,
			Help: "Round trip of confirmed session lease renewals."}),
		kaFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "session_keepalive_failures_total", ConstLabels: cl,
			Help: "Session lease renewals that failed."}),
		started: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sessions_started_total", ConstLabels: cl,
			Help: "Session leases granted: a Client's first, and each after a lost session."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sessions_lost_total", ConstLabels: cl,
			Help: "Sessions lost: the lease ran out without a confirmed renewal, or etcd no longer had it."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "fenced_writes_total", ConstLabels: cl,
			Help: "Fenced writes by adapter and result: accepted, stale (refused, a higher token is stored), lost (refused, the lock is known lost), error."}, []string{"adapter", "result"}),
	}
	for _, r := range []lockclient.AcquireResult{lockclient.AcquireGranted, lockclient.AcquireHeldByOther, lockclient.AcquireError} {
		m.acqByResult[r] = m.acquisitions.WithLabelValues(r.String())
	}
	for _, r := range []lockclient.EndReason{lockclient.EndLeaseExpired, lockclient.EndNotRenewed, lockclient.EndKeyDeleted} {
		m.lossByCause[r] = m.losses.WithLabelValues(r.String())
	}
	for _, col := range []prometheus.Collector{m.acquisitions, m.wait, m.hold, m.held, m.losses, m.keepalive, m.kaFailures, m.started, m.lost, m.writes} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("lockmetrics: register: %w", err)
		}
	}
	return m, nil
}

// Acquired implements lockclient.Observer.
func (m *Metrics) Acquired(_ string, r lockclient.AcquireResult, wait time.Duration) {
	if r < 1 || int(r) >= len(m.acqByResult) {
		r = lockclient.AcquireError
	}
	m.acqByResult[r].Inc()
	if r == lockclient.AcquireGranted {
		m.wait.Observe(wait.Seconds())
		m.held.Inc()
	}
}

// Ended implements lockclient.Observer.
func (m *Metrics) Ended(_ string, _ fence.Token, r lockclient.EndReason, held time.Duration) {
	m.held.Dec()
	m.hold.Observe(held.Seconds())
	if r.Lost() {
		m.lossByCause[r].Inc()
	}
}

// KeepAlive implements lockclient.Observer.
func (m *Metrics) KeepAlive(rtt time.Duration, err error) {
	if err != nil {
		m.kaFailures.Inc()
		return
	}
	m.keepalive.Observe(rtt.Seconds())
}

// SessionStarted implements lockclient.SessionObserver.
func (m *Metrics) SessionStarted() { m.started.Inc() }

// SessionLost implements lockclient.SessionObserver.
func (m *Metrics) SessionLost(int) { m.lost.Inc() }

// FencedWrite implements fence.WriteObserver.
func (m *Metrics) FencedWrite(adapter, _ string, r fence.WriteResult) {
	m.writes.WithLabelValues(adapter, r.String()).Inc()
}

// SessionsStarted returns the counter of session leases granted, for tests and
// health checks.
func (m *Metrics) SessionsStarted() prometheus.Counter { return m.started }

// LocksHeld returns the gauge of locks held now, for tests and health checks.
func (m *Metrics) LocksHeld() prometheus.Gauge { return m.held }
