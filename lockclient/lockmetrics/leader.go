package lockmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/fence"
)

// leaderMetrics are the collectors of Lead's terms. Unlike lock names, the
// names a process campaigns for are few and fixed by its code, so they are
// labels.
type leaderMetrics struct {
	leader *prometheus.GaugeVec   // 1 while this process leads name
	begun  *prometheus.CounterVec // terms begun, by name
	ended  *prometheus.CounterVec // terms ended, by name and cause
}

func newLeaderMetrics(ns string) *leaderMetrics {
	return &leaderMetrics{
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "leader",
			Help: "1 while this process holds a term of Lead for the name, else 0."}, []string{"name"}),
		begun: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "leader_terms_begun_total",
			Help: "Terms of Lead begun, by name."}, []string{"name"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "leader_terms_ended_total",
			Help: "Terms of Lead ended, by name and cause: resigned, returned, failed, panicked, lease_expired, not_renewed, key_deleted, max_hold, closed."}, []string{"name", "cause"}),
	}
}

func (l *leaderMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.leader, l.begun, l.ended}
}

// TermBegun implements lockclient.Observer: leader{name} is 1 and a
// term is counted begun.
func (m *Metrics) TermBegun(name string, _ fence.Token) {
	m.lead.leader.WithLabelValues(name).Set(1)
	m.lead.begun.WithLabelValues(name).Inc()
}

// TermEnded implements lockclient.Observer: leader{name} is 0 and the
// term is counted ended under its cause.
func (m *Metrics) TermEnded(name string, _ fence.Token, _ time.Duration, cause string) {
	m.lead.leader.WithLabelValues(name).Set(0)
	m.lead.ended.WithLabelValues(name, cause).Inc()
}
