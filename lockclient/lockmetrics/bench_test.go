package lockmetrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/lockmetrics"
)

type nopObserver struct{}

func (nopObserver) Acquired(string, time.Duration, error)                {}
func (nopObserver) Ended(string, fence.Token, time.Duration, error)      {}
func (nopObserver) KeepAlive(time.Duration, error)                       {}
func (nopObserver) Session(int, error)                                   {}
func (nopObserver) Retried(string, error)                                {}
func (nopObserver) TermBegun(string, fence.Token)                        {}
func (nopObserver) TermEnded(string, fence.Token, time.Duration, string) {}
func (nopObserver) FencedWrite(string, string, error)                    {}

type observer interface {
	lockclient.Observer
	fence.WriteObserver
}

// BenchmarkMetrics_lockLifetime is the metrics work of one lock's life (grant,
// one fenced write, release), against an observer that does nothing; it reports
// the ratio of the two as metrics/nop.
func BenchmarkMetrics_lockLifetime(b *testing.B) {
	m, err := lockmetrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	life := func(o observer, n int) time.Duration {
		start := time.Now()
		for range n {
			o.Acquired("a", time.Millisecond, nil)
			o.FencedWrite("pgxfence", "fenced", nil)
			o.Ended("a", 1, time.Second, lockclient.ErrReleased)
		}
		return time.Since(start)
	}
	var nop, met time.Duration
	for b.Loop() {
		nop += life(nopObserver{}, 100)
		met += life(m, 100)
	}
	b.ReportMetric(float64(met.Nanoseconds())/float64(b.N*100), "ns/life")
	b.ReportMetric(float64(met)/float64(nop), "metrics/nop")
}
