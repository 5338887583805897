package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The benchmark compares this client with etcd's concurrency.Mutex on one
// 3-member etcd cluster (locktest) in one run: uncontended acquire+release pairs at
// maximum and at a fixed 1,000 jobs/s, and contended try-acquires. Each phase
// alternates the two in rounds, so that load from elsewhere on the machine falls
// on both alike. Run it once (it times itself):
//
//	go test -run '^$' -bench BenchmarkLockclient -benchtime 1x ./lockclient/
const (
	benchRounds  = 8
	benchSlice   = time.Second // per variant per round
	benchWorkers = 64
	benchRate    = 1000 // jobs/s of the fixed-rate phase
	benchTries   = 200  // contended try-acquires per variant per round
)

// pairer is one lock implementation under test: take and release name.
type pairer interface {
	pair(ctx context.Context, name string) (acquire time.Duration, err error)
	try(ctx context.Context, name string) error // must fail: the name is held
	hold(ctx context.Context, name string) error
}

type lcPairer struct{ c, other *lockclient.Client }

func (p lcPairer) pair(ctx context.Context, name string) (time.Duration, error) {
	t0 := time.Now()
	l, err := p.c.Acquire(ctx, name)
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	return d, l.Release(ctx)
}

func (p lcPairer) hold(ctx context.Context, name string) error {
	_, err := p.other.Acquire(ctx, name)
	return err
}

func (p lcPairer) try(ctx context.Context, name string) error {
	_, err := p.c.TryAcquire(ctx, name)
	if errors.Is(err, lockclient.ErrHeld) {
		return nil
	}
	return fmt.Errorf("TryAcquire of a held lock: %v", err)
}

type mutexPairer struct{ s, other *concurrency.Session }

func (p mutexPairer) pair(ctx context.Context, name string) (time.Duration, error) {
	m := concurrency.NewMutex(p.s, "/bench/mutex/"+name)
	t0 := time.Now()
	err := m.Lock(ctx)
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	return d, m.Unlock(ctx)
}

func (p mutexPairer) hold(ctx context.Context, name string) error {
	return concurrency.NewMutex(p.other, "/bench/mutex/"+name).Lock(ctx)
}

func (p mutexPairer) try(ctx context.Context, name string) error {
	err := concurrency.NewMutex(p.s, "/bench/mutex/"+name).TryLock(ctx)
	if errors.Is(err, concurrency.ErrLocked) {
		return nil
	}
	return fmt.Errorf("TryLock of a held mutex: %v", err)
}

// result accumulates one variant's pairs over the rounds.
type result struct {
	errors    atomic.Int64 // pairs that failed (etcd timed out under load); not counted as pairs
	elections uint64       // raft elections while this variant ran
	pairs     int
	elapsed   time.Duration
	drain     time.Duration // fixed rate: longest wait, after the last job started, for all to finish
	lat       []time.Duration
}

func (r *result) rate() float64 { return float64(r.pairs) / r.elapsed.Seconds() }

func (r *result) pct(p float64) float64 {
	if len(r.lat) == 0 {
		return 0
	}
	slices.Sort(r.lat)
	i := min(int(float64(len(r.lat))*p), len(r.lat)-1)
	return float64(r.lat[i]) / float64(time.Millisecond)
}

// runMax runs benchWorkers workers doing pairs on distinct names for d.
func runMax(b *testing.B, p pairer, tag string, d time.Duration, r *result) {
	ctx, cancel := context.WithTimeout(b.Context(), d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range benchWorkers {
		wg.Go(func() {
			var lat []time.Duration
			for k := 0; ctx.Err() == nil; k++ {
				a, err := p.pair(ctx, fmt.Sprintf("%s-max-%d-%d", tag, w, k%8))
				if err != nil {
					if ctx.Err() == nil {
						r.errors.Add(1)
						b.Logf("pair: %v", err)
					}
					continue
				}
				lat = append(lat, a)
			}
			mu.Lock()
			r.pairs += len(lat)
			r.lat = append(r.lat, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r.elapsed += time.Since(start)
}

// runRate starts benchRate jobs a second for d (open loop: a late job does not
// delay the next one's start), each a pair on a distinct name, and waits for all.
func runRate(b *testing.B, p pairer, tag string, d time.Duration, r *result) {
	ctx := b.Context()
	n := int(d.Seconds() * benchRate)
	jobs := make(chan int, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 * benchWorkers {
		wg.Go(func() {
			var lat []time.Duration
			for j := range jobs {
				a, err := p.pair(ctx, fmt.Sprintf("%s-rate-%d", tag, j%512))
				if err != nil {
					r.errors.Add(1)
					b.Logf("pair: %v", err)
					continue
				}
				lat = append(lat, a)
			}
			mu.Lock()
			r.pairs += len(lat)
			r.lat = append(r.lat, lat...)
			mu.Unlock()
		})
	}
	start := time.Now()
	interval := time.Second / benchRate
	for j := range n {
		if wait := time.Until(start.Add(time.Duration(j) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		jobs <- j
	}
	close(jobs)
	dispatched := time.Now()
	wg.Wait()
	r.elapsed += time.Since(start)
	r.drain = max(r.drain, time.Since(dispatched))
}

func BenchmarkLockclient(b *testing.B) {
	cl := locktest.StartCluster(b, 3)
	newLC := func() *lockclient.Client { return newClient(b, cl.Client(b)) }
	newSession := func() *concurrency.Session {
		s, err := concurrency.NewSession(cl.Client(b), concurrency.WithTTL(int(defaultTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	lc := lcPairer{c: newLC(), other: newLC()}
	mx := mutexPairer{s: newSession(), other: newSession()}
	// Warm up both (sessions granted, connections and stacks grown); discarded.
	for _, p := range []pairer{lc, mx} {
		runMax(b, p, "warmup", benchSlice/2, &result{})
	}

	// The contended phase's holders, taken once: a sub-benchmark may run again.
	if err := lc.hold(b.Context(), "hot"); err != nil {
		b.Fatal(err)
	}
	if err := mx.hold(b.Context(), "hot"); err != nil {
		b.Fatal(err)
	}

	{
		b.Run("uncontended_max", func(b *testing.B) {
			defer func(l0 float64) { b.ReportMetric(max(l0, loadAvg()), "loadavg-1m") }(loadAvg())
			var l, m result
			for i := range benchRounds {
				alternate(cl, i, func() { runMax(b, lc, "lc", benchSlice, &l) }, func() { runMax(b, mx, "mx", benchSlice, &m) }, &l, &m)
			}
			b.ReportMetric(l.rate(), "lockclient-pairs/s")
			b.ReportMetric(m.rate(), "mutex-pairs/s")
			b.ReportMetric(l.rate()/m.rate(), "x-mutex-throughput")
			b.ReportMetric(float64(l.errors.Load()), "lockclient-errors")
			b.ReportMetric(float64(m.errors.Load()), "mutex-errors")
			b.ReportMetric(float64(l.elections), "lockclient-elections")
			b.ReportMetric(float64(m.elections), "mutex-elections")
			b.ReportMetric(l.pct(0.5), "lockclient-p50-ms")
			b.ReportMetric(l.pct(0.99), "lockclient-p99-ms")
			b.ReportMetric(m.pct(0.5), "mutex-p50-ms")
			b.ReportMetric(m.pct(0.99), "mutex-p99-ms")
		})
		b.Run("uncontended_1000_per_s", func(b *testing.B) {
			defer func(l0 float64) { b.ReportMetric(max(l0, loadAvg()), "loadavg-1m") }(loadAvg())
			var l, m result
			for i := range benchRounds {
				alternate(cl, i, func() { runRate(b, lc, "lc", benchSlice, &l) }, func() { runRate(b, mx, "mx", benchSlice, &m) }, &l, &m)
			}
			b.ReportMetric(l.rate(), "lockclient-pairs/s")
			b.ReportMetric(m.rate(), "mutex-pairs/s")
			b.ReportMetric(l.pct(0.5), "lockclient-p50-ms")
			b.ReportMetric(l.pct(0.99), "lockclient-p99-ms")
			b.ReportMetric(m.pct(0.5), "mutex-p50-ms")
			b.ReportMetric(m.pct(0.99), "mutex-p99-ms")
			b.ReportMetric(l.pct(0.99)/m.pct(0.99), "x-mutex-p99")
			b.ReportMetric(float64(l.drain)/float64(time.Millisecond), "lockclient-drain-ms")
			b.ReportMetric(float64(m.drain)/float64(time.Millisecond), "mutex-drain-ms")
			b.ReportMetric(float64(l.errors.Load()), "lockclient-errors")
			b.ReportMetric(float64(m.errors.Load()), "mutex-errors")
			b.ReportMetric(float64(l.elections), "lockclient-elections")
			b.ReportMetric(float64(m.elections), "mutex-elections")
		})
		b.Run("contended_try", func(b *testing.B) {
			defer func(l0 float64) { b.ReportMetric(max(l0, loadAvg()), "loadavg-1m") }(loadAvg())
			probe := cl.Client(b)
			var lRev, mRev int64
			var lT, mT time.Duration
			for range benchRounds {
				r, t := runTry(b, lc, probe, "hot")
				lRev, lT = lRev+r, lT+t
				r, t = runTry(b, mx, probe, "hot")
				mRev, mT = mRev+r, mT+t
			}
			n := float64(benchRounds * benchTries)
			b.ReportMetric(float64(lRev)/n, "lockclient-revisions/try")
			b.ReportMetric(float64(mRev)/n, "mutex-revisions/try")
			b.ReportMetric(n/lT.Seconds(), "lockclient-tries/s")
			b.ReportMetric(n/mT.Seconds(), "mutex-tries/s")
		})
		b.Run("hold_10000", func(b *testing.B) {
			// One Client holding 10,000 locks (half with manual renewal). The heap
			// growth is this process's: the client's own memory (the etcd members
			// run in processes of their own).
			// A Client of its own, closed at the end, so that a rerun (a larger
			// -benchtime) starts from no locks held.
			c, err := lockclient.New(cl.Client(b))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Acquire(b.Context(), "hold-warmup"); err != nil {
				b.Fatal(err)
			}
			heap := func() uint64 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			g0, h0 := runtime.NumGoroutine(), heap()
			const n = 10000
			locks := make([]*lockclient.Lock, n)
			var wg sync.WaitGroup
			for w := range benchWorkers {
				wg.Go(func() {
					for i := w; i < n; i += benchWorkers {
						var opts []lockclient.LockOption
						if i%2 == 1 {
							opts = append(opts, lockclient.WithManualRenewal(time.Hour))
						}
						l, err := c.Acquire(b.Context(), fmt.Sprintf("hold-%d", i), opts...)
						if err != nil {
							b.Error(err)
							return
						}
						locks[i] = l
						_ = l.Done()
					}
				})
			}
			wg.Wait()
			h1 := heap()
			b.ReportMetric(float64(int64(h1)-int64(h0))/(1<<20), "heap-MB-incl-etcd")
			b.ReportMetric(float64(runtime.NumGoroutine()-g0), "goroutines-added")
			runtime.KeepAlive(locks)
		})
	}
}
