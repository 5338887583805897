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
// Several programs or components sharing one registry tell their metrics apart
// with Prometheus's own wrappers: prometheus.WrapRegistererWithPrefix adds a name
// prefix, and prometheus.WrapRegistererWith constant labels (such as the service
// name; each Metrics on the registry then carries the same label names).
//
// The metrics:
//
//	fencegate_lock_acquisitions_total{result}   counter: Acquire/TryAcquire calls by result: granted, held_by_other, error
//	fencegate_lock_wait_seconds                 histogram: time a granted Acquire/TryAcquire took (mostly the wait for the holder)
//	fencegate_lock_hold_seconds                 histogram: time from grant to release, close or loss
//	fencegate_locks_held                        gauge: locks held now
//	fencegate_lock_losses_total{cause}          counter: locks lost by cause: lease_expired, not_renewed, key_deleted, max_hold
//	fencegate_session_keepalive_seconds         histogram: round trip of confirmed session lease renewals
//	fencegate_session_keepalive_failures_total  counter: session lease renewals that failed
//	fencegate_sessions_started_total            counter: session leases granted (a Client's first, and each after a lost one)
//	fencegate_sessions_lost_total               counter: sessions lost (their locks are counted in lock_losses_total{cause="lease_expired"})
//	fencegate_fenced_writes_total{adapter,result} counter: fenced writes by adapter (pgxfence, sqlfence) and result: accepted, stale, lost, error
//	fencegate_leader{name}                      gauge: 1 while this process holds a term of Lead for name (is-leader), else 0
//	fencegate_leader_terms_begun_total{name}    counter: terms of Lead begun
//	fencegate_leader_terms_ended_total{name,cause} counter: terms ended by cause: resigned, returned, failed, panicked, lease_expired, not_renewed, key_deleted, max_hold, closed
//	fencegate_etcd_retries_total{op}            counter: requests an overloaded etcd refused before acting, sent again (acquire, release, renew, grant);
//	                                            op connect: intervals (5 s) a call waited on an etcd it could not reach
//
// Lock names are not labels: they are unbounded. The names given to Lead are
// (a process campaigns for a few names fixed by its code). Every method is a few atomic
// adds; there is no goroutine.
package lockmetrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/lockclient"
)

// Metrics implements lockclient.Observer and fence.WriteObserver by updating
// Prometheus collectors. It is safe for concurrent use.
type Metrics struct {
	acquisitions *prometheus.CounterVec
	granted      prometheus.Counter // acquisitions{result="granted"}
	heldByOther  prometheus.Counter // acquisitions{result="held_by_other"}
	acqErrors    prometheus.Counter // acquisitions{result="error"}
	wait         prometheus.Histogram
	hold         prometheus.Histogram
	held         prometheus.Gauge
	losses       *prometheus.CounterVec
	leaseExpired prometheus.Counter // losses{cause="lease_expired"}
	notRenewed   prometheus.Counter // losses{cause="not_renewed"}
	keyDeleted   prometheus.Counter // losses{cause="key_deleted"}
	maxHold      prometheus.Counter // losses{cause="max_hold"}
	keepalive    prometheus.Histogram
	kaFailures   prometheus.Counter
	started      prometheus.Counter
	lost         prometheus.Counter
	writes       *prometheus.CounterVec
	retries      *prometheus.CounterVec
	lead         *leaderMetrics
}

var (
	_ lockclient.Observer = (*Metrics)(nil)
	_ fence.WriteObserver = (*Metrics)(nil)
)

// Option configures New.
type Option func(*config) error

type config struct {
	waitBuckets []float64
	holdBuckets []float64
	keepBuckets []float64
}

// WithBuckets sets the histogram buckets, in seconds, of the wait, hold and
// keepalive histograms; a nil slice keeps that histogram's default. Each must
// be strictly increasing.
func WithBuckets(wait, hold, keepalive []float64) Option {
	return func(c *config) error {
		for _, b := range [][]float64{wait, hold, keepalive} {
			for i := 1; i < len(b); i++ {
				if b[i] <= b[i-1] {
					return fmt.Errorf("lockmetrics: WithBuckets: %v is not strictly increasing: %w", b, fence.ErrInvalidArgument)
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

// New returns Metrics whose collectors are registered with reg. It returns an
// error wrapping fence.ErrInvalidArgument, naming the option, for an unusable
// option or a nil reg, and reg's error when a collector of the same name is
// already registered.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("lockmetrics: New: nil registerer: %w", fence.ErrInvalidArgument)
	}
	c := config{
		waitBuckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
		holdBuckets: []float64{.01, .05, .1, .5, 1, 2, 5, 10, 30, 60, 300, 1800, 3600},
		keepBuckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("lockmetrics: New: option %d is nil: %w", i, fence.ErrInvalidArgument)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	const ns = "fencegate"
	m := &Metrics{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lock_acquisitions_total",
			Help: "Acquire and TryAcquire calls by result: granted, held_by_other, error."}, []string{"result"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "lock_wait_seconds", Buckets: c.waitBuckets,
			Help: "Time a granted Acquire or TryAcquire took, mostly waiting for the previous holder."}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "lock_hold_seconds", Buckets: c.holdBuckets,
			Help: "Time locks were held, from grant to release, close or loss."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "locks_held",
			Help: "Locks held now."}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "lock_losses_total",
			Help: "Locks lost by cause: lease_expired (session lease ran out), not_renewed (manual renewal missed), key_deleted (key deleted by someone else), max_hold (WithMaxHold reached)."}, []string{"cause"}),
		keepalive: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "session_keepalive_seconds", Buckets: c.keepBuckets,
			Help: "Round trip of confirmed session lease renewals."}),
		kaFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "session_keepalive_failures_total",
			Help: "Session lease renewals that failed."}),
		started: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sessions_started_total",
			Help: "Session leases granted: a Client's first, and each after a lost session."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sessions_lost_total",
			Help: "Sessions lost: the lease ran out without a confirmed renewal, or etcd no longer had it."}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "fenced_writes_total",
			Help: "Fenced writes by adapter and result: accepted, stale (refused, a higher token is stored), lost (refused, the lock is known lost), error."}, []string{"adapter", "result"}),
	}
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "etcd_retries_total",
		Help: "Requests an overloaded etcd refused before acting on them (too many requests), sent again, by op; op connect: intervals a call waited on an etcd it could not reach."}, []string{"op"})
	m.granted = m.acquisitions.WithLabelValues("granted")
	m.heldByOther = m.acquisitions.WithLabelValues("held_by_other")
	m.acqErrors = m.acquisitions.WithLabelValues("error")
	m.leaseExpired = m.losses.WithLabelValues("lease_expired")
	m.notRenewed = m.losses.WithLabelValues("not_renewed")
	m.keyDeleted = m.losses.WithLabelValues("key_deleted")
	m.maxHold = m.losses.WithLabelValues("max_hold")
	m.lead = newLeaderMetrics(ns)
	for _, col := range append([]prometheus.Collector{m.acquisitions, m.wait, m.hold, m.held, m.losses, m.keepalive, m.kaFailures, m.started, m.lost, m.writes, m.retries}, m.lead.collectors()...) {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("lockmetrics: register: %w", err)
		}
	}
	return m, nil
}

// Acquired implements lockclient.Observer: result "granted" for a nil err,
// "held_by_other" for ErrHeld, "error" otherwise.
func (m *Metrics) Acquired(_ string, wait time.Duration, err error) {
	switch {
	case err == nil:
		m.granted.Inc()
		m.wait.Observe(wait.Seconds())
		m.held.Inc()
	case errors.Is(err, lockclient.ErrHeld):
		m.heldByOther.Inc()
	default:
		m.acqErrors.Inc()
	}
}

// Ended implements lockclient.Observer. A cause matching fence.ErrLost counts
// a loss: "lease_expired" if it matches lockclient.ErrSessionLost,
// "not_renewed" if lockclient.ErrNotRenewed, "max_hold" if lockclient.ErrMaxHold,
// "key_deleted" otherwise.
func (m *Metrics) Ended(_ string, _ fence.Token, held time.Duration, cause error) {
	m.held.Dec()
	m.hold.Observe(held.Seconds())
	switch {
	case !errors.Is(cause, fence.ErrLost):
	case errors.Is(cause, lockclient.ErrSessionLost):
		m.leaseExpired.Inc()
	case errors.Is(cause, lockclient.ErrNotRenewed):
		m.notRenewed.Inc()
	case errors.Is(cause, lockclient.ErrMaxHold):
		m.maxHold.Inc()
	default:
		m.keyDeleted.Inc()
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

// Session implements lockclient.Observer: a nil err counts a session started,
// any other a session lost.
func (m *Metrics) Session(_ int, err error) {
	if err == nil {
		m.started.Inc()
		return
	}
	m.lost.Inc()
}

// FencedWrite implements fence.WriteObserver: it counts the write under its adapter
// and its result, "accepted", "stale", "lost", "commit_unknown" or "error".
func (m *Metrics) FencedWrite(adapter, _ string, err error) {
	m.writes.WithLabelValues(adapter, grant.WriteResult(err)).Inc()
}

// Retried implements lockclient.Observer: one request etcd refused as
// overloaded and the Client sent again, or one interval a call waited on an
// unreachable etcd (op "connect"), counted under its op.
func (m *Metrics) Retried(op string, _ error) { m.retries.WithLabelValues(op).Inc() }
