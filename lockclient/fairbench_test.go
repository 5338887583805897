package lockclient_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkContended measures waiting: N workers contend for one lock name
// (acquire, hold 5 ms, release, again) on one etcd member, lockclient (each
// worker its own Client) and etcd's concurrency.Mutex (each worker its own
// Session) one after the other in one run, each worker on an etcd connection
// of its own, as separate processes would be. Per variant it reports handoffs a
// second, raft entries per handoff, the wait for a grant (p50, p99, max) and
// the workers that got no grant in the window. Run it once, on a quiet machine:
//
//	go test -run '^$' -bench Contended -benchtime 1x ./lockclient/
//
// FENCEGATE_CONTENDED_WINDOW sets the measured window (default 20s; a Go
// duration or whole seconds); -bench 'Contended/N=10$' picks one N.
//
// Raft entries are counted from the member's raft index (maintenance Status)
// read at the window's start and end. Keepalives are not raft entries, but
// whatever else the member appends meanwhile would be counted: so each variant
// first idles for a second with every session open and no lock traffic, and
// that idle rate over the window is subtracted (it is reported, and should be
// 0). Only grants inside the window count as handoffs, and only their waits;
// the workers start a warm-up before it, so that every one has taken its place
// before the window opens.
func BenchmarkContended(b *testing.B) {
	window := contendedWindow(b)
	srv := locktest.Start(b)
	status := srv.Client(b)
	for i, n := range []int{10, 50, 200} {
		b.Run("N="+strconv.Itoa(n), func(b *testing.B) {
			defer func(l0 float64) { b.ReportMetric(max(l0, loadAvg()), "loadavg-1m") }(loadAvg())
			var lc, mx contendedResult
			runLC := func() { lc = runContended(b, status, srv.Endpoints()[0], lockclientContenders(b, srv, n), window) }
			runMX := func() { mx = runContended(b, status, srv.Endpoints()[0], mutexContenders(b, srv, n), window) }
			if i%2 == 0 {
				runLC()
				runMX()
			} else {
				runMX()
				runLC()
			}
			lc.report(b, "lockclient")
			mx.report(b, "mutex")
			b.ReportMetric(lc.rate()/mx.rate(), "x-mutex-handoffs")
			b.ReportMetric(lc.pct(0.99)/mx.pct(0.99), "x-mutex-wait-p99")
		})
	}
}

const (
	contendedHold = 5 * time.Millisecond
	contendedIdle = time.Second // the idle baseline of raft entries
)

func contendedWindow(b *testing.B) time.Duration {
	s := os.Getenv("FENCEGATE_CONTENDED_WINDOW")
	if s == "" {
		return 20 * time.Second
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	b.Fatalf("FENCEGATE_CONTENDED_WINDOW=%q: want a duration such as 20s", s)
	return 0
}

// contenders is one variant's workers: acquire takes the lock for worker i and
// returns its release; close ends every worker's session.
type contenders struct {
	acquire []func(ctx context.Context) (release func(context.Context) error, err error)
	close   func()
}

func lockclientContenders(b *testing.B, srv *locktest.Cluster, n int) contenders {
	const name = "contended"
	clients := make([]*lockclient.Client, n)
	var ws contenders
	for i := range clients {
		c, err := lockclient.New(srv.Client(b), lockclient.WithIdentity(fmt.Sprintf("worker-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
		ws.acquire = append(ws.acquire, func(ctx context.Context) (func(context.Context) error, error) {
			l, err := c.Acquire(ctx, name)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		})
	}
	ws.close = func() {
		for _, c := range clients {
			c.Close()
		}
	}
	// Grant every session before the run (a grant is a raft entry).
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			l, err := c.TryAcquire(b.Context(), "warm-"+strconv.Itoa(i))
			if err == nil {
				err = l.Release(b.Context())
			}
			if err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		ws.close()
		b.FailNow()
	}
	return ws
}

func mutexContenders(b *testing.B, srv *locktest.Cluster, n int) contenders {
	sessions := make([]*concurrency.Session, n)
	var ws contenders
	for i := range sessions {
		s, err := concurrency.NewSession(srv.Client(b), concurrency.WithTTL(int(defaultTTL/time.Second)))
		if err != nil {
			b.Fatal(err)
		}
		sessions[i] = s
		m := concurrency.NewMutex(s, "/bench/contended")
		ws.acquire = append(ws.acquire, func(ctx context.Context) (func(context.Context) error, error) {
			if err := m.Lock(ctx); err != nil {
				return nil, err
			}
			return m.Unlock, nil
		})
	}
	ws.close = func() {
		for _, s := range sessions {
			s.Close()
		}
	}
	return ws
}

// contendedResult is one variant's window.
type contendedResult struct {
	window   time.Duration
	handoffs int
	entries  float64 // raft entries in the window, less the idle rate's
	idleRate float64 // raft entries a second with no lock traffic
	waits    []time.Duration
	starved  int // workers without a grant in the window
	errors   int64
}

func (r *contendedResult) rate() float64 { return float64(r.handoffs) / r.window.Seconds() }

func (r *contendedResult) pct(p float64) float64 {
	if len(r.waits) == 0 {
		return 0
	}
	i := min(int(float64(len(r.waits))*p), len(r.waits)-1)
	return float64(r.waits[i]) / float64(time.Millisecond)
}

func (r *contendedResult) report(b *testing.B, tag string) {
	b.ReportMetric(r.rate(), tag+"-handoffs/s")
	b.ReportMetric(r.entries/float64(max(r.handoffs, 1)), tag+"-raft-entries/handoff")
	b.ReportMetric(r.pct(0.5), tag+"-wait-p50-ms")
	b.ReportMetric(r.pct(0.99), tag+"-wait-p99-ms")
	b.ReportMetric(r.pct(1), tag+"-wait-max-ms")
	b.ReportMetric(float64(r.starved), tag+"-workers-no-grant")
	b.ReportMetric(float64(r.errors), tag+"-errors")
	b.ReportMetric(r.idleRate, tag+"-idle-raft-entries/s")
}

// raftIndex reads the member's raft index: one more with every entry appended.
func raftIndex(b *testing.B, cli *clientv3.Client, endpoint string) uint64 {
	resp, err := cli.Status(b.Context(), endpoint)
	if err != nil {
		b.Fatalf("Status of %s: %v", endpoint, err)
	}
	return resp.RaftIndex
}

// runContended runs ws for a warm-up and then the window, and closes them.
func runContended(b *testing.B, status *clientv3.Client, endpoint string, ws contenders, window time.Duration) contendedResult {
	defer ws.close()
	r := contendedResult{window: window}
	i0, t0 := raftIndex(b, status, endpoint), time.Now()
	time.Sleep(contendedIdle)
	r.idleRate = float64(raftIndex(b, status, endpoint)-i0) / time.Since(t0).Seconds()

	type grant struct {
		at   time.Time
		wait time.Duration
	}
	grants := make([][]grant, len(ws.acquire))
	var inside, overlaps, errs atomic.Int64
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	var wg sync.WaitGroup
	for w, acquire := range ws.acquire {
		wg.Go(func() {
			for ctx.Err() == nil {
				start := time.Now()
				release, err := acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						if errs.Add(1) <= 5 {
							b.Logf("worker %d: acquire: %v", w, err)
						}
					}
					continue
				}
				now := time.Now()
				grants[w] = append(grants[w], grant{now, now.Sub(start)})
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(contendedHold)
				inside.Add(-1)
				rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := release(rctx); err != nil && errs.Add(1) <= 5 {
					b.Logf("worker %d: release: %v", w, err)
				}
				rcancel()
			}
		})
	}
	time.Sleep(min(max(window/10, time.Second), 5*time.Second)) // warm-up: every worker in line
	i1, from := raftIndex(b, status, endpoint), time.Now()
	time.Sleep(window)
	to := time.Now()
	i2 := raftIndex(b, status, endpoint)
	cancel()
	wg.Wait()

	r.window = to.Sub(from)
	r.entries = float64(i2-i1) - r.idleRate*r.window.Seconds()
	for _, gs := range grants {
		n := 0
		for _, g := range gs {
			if !g.at.Before(from) && !g.at.After(to) {
				r.waits = append(r.waits, g.wait)
				n++
			}
		}
		if n == 0 {
			r.starved++
		}
		r.handoffs += n
	}
	slices.Sort(r.waits)
	r.errors = errs.Load()
	if n := overlaps.Load(); n > 0 {
		b.Errorf("%d grants while another worker held the lock", n)
	}
	return r
}
