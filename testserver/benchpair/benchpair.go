// Package benchpair compares two variants of an operation within one benchmark run,
// so that the ratio, not an absolute rate, is what a run reports: the adapters'
// benchmarks measure a fenced or guarded write against its plain baseline on a
// machine shared with the database server and other work.
package benchpair

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// Op is one operation by worker w, its i-th (counted from 1 for each worker, over
// the whole benchmark, so a worker can use i for fresh keys).
type Op func(ctx context.Context, w, i int) error

// Compare runs base and other with len(next) workers each, next[w] counting worker
// w's operations. After a warm-up of 8 operations per worker of each (the pool, the
// statement caches and PostgreSQL's generic plans, made after 5 executions per
// connection), it runs 20 rounds of b.N operations per variant, each round a pair
// back to back in alternating order (AB BA AB ...): bursts of other load on the
// shared machine then hit a pair, not a variant. It reports base_ops/s and
// fenced_ops/s, the rates over all rounds, and ratio, the median over rounds of
// other's rate / base's rate. An operation's error fails b and stops that worker.
func Compare(b *testing.B, next []int, base, other Op) {
	ctx := context.Background()
	workers := len(next)
	run := func(f Op, n int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			share := n / workers
			if w < n%workers {
				share++
			}
			wg.Go(func() {
				for range share {
					next[w]++
					if err := f(ctx, w, next[w]); err != nil {
						b.Errorf("worker %d: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	run(base, 8*workers)
	run(other, 8*workers)
	b.ResetTimer()
	const rounds = 20
	var baseDur, otherDur time.Duration
	ratios := make([]float64, 0, rounds)
	for round := range rounds {
		var bd, od time.Duration
		if round%2 == 0 {
			bd, od = run(base, b.N), run(other, b.N)
		} else {
			od, bd = run(other, b.N), run(base, b.N)
		}
		baseDur, otherDur = baseDur+bd, otherDur+od
		ratios = append(ratios, bd.Seconds()/od.Seconds())
	}
	b.StopTimer()
	slices.Sort(ratios)
	b.ReportMetric(float64(rounds*b.N)/baseDur.Seconds(), "base_ops/s")
	b.ReportMetric(float64(rounds*b.N)/otherDur.Seconds(), "fenced_ops/s")
	b.ReportMetric((ratios[rounds/2-1]+ratios[rounds/2])/2, "ratio")
}
