package lockclient_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// BenchmarkSeedScale is the problem statement's load as users would run it: N
// workers, each a lockclient.Client with its own session lease (as each would
// be its own server), sharing seedConns etcd connections only to fit on one
// machine; a fresh 3-member cluster per variant; 1,000 jobs a second
// offered open-loop, each acquiring a random one of 100,000 accounts through a
// random worker, holding it 50 ms and releasing it. etcd's concurrency.Session
// and Mutex do the same on a cluster of their own in the same run, the two
// alternating in order from one worker count to the next. It is heavy (minutes,
// gigabytes) and runs only when asked:
//
//	FENCEGATE_SEED_WORKERS=10000,20000 go test -run '^$' -bench BenchmarkSeedScale -benchtime 1x -timeout 60m ./lockclient/
//
// FENCEGATE_SEED_VARIANTS picks the variants (default lockclient,mutex-own,mutex):
// lockclient is this package (one long-lived keepalive stream per session),
// lockclient-half the same with WithRenewInterval(TTL/2) (a busy session renews
// as seldom as an idle one), mutex is concurrency.Session+Mutex with clientv3's
// lessor per connection (all sessions of a connection renewed on one keepalive
// stream, as no two separate processes could), and mutex-own is Session+Mutex
// with a lessor of its own per session (its own keepalive stream on the shared
// connection, as each server's clientv3 would have: lockclient's footing). The
// renewal designs measured before (KeepAliveOnce per renewal, a lazy session,
// renewals on a wall-clock grid) left the package; their numbers are in
// BENCHMARKS.md's git history, and running an earlier commit's benchmark beside
// this one measures the code of then against the code of now.
// FENCEGATE_SEED_CONNS sets the shared connections (default 16; as many as
// workers gives each its own, as separate servers have).
// FENCEGATE_SEED_RATE sets the jobs offered a second (default 1000; 0 measures
// what idle sessions cost: the CPU of the renewals alone). FENCEGATE_SEED_SECONDS sets the measured time (default 30 s, three TTLs, so
// that a session that cannot be kept is seen lost), and FENCEGATE_SEED_PROFILE a
// directory for a CPU profile of the clients' side of each variant's measured
// time (go tool pprof -top FILE), and FENCEGATE_SEED_SETTLE the most seconds to
// wait for a quiet machine before each variant (default 300). The members run in
// processes of their own; their goroutines, heap, CPU and counters come from
// their /metrics endpoints: etcd-cpu-s/1000jobs is the members' CPU per 1,000
// jobs done, renewals/s the leases they renewed, etcd-cpu-us/renewal their CPU
// per renewal (all of it, so only an idle run reads as a renewal's cost),
// keepalives-at-leader-% the share of keepalives the leader received (a
// follower forwards the rest to it), ka-streams-opened/s the keepalive streams
// opened during the measured time.
func BenchmarkSeedScale(b *testing.B) {
	counts := os.Getenv("FENCEGATE_SEED_WORKERS")
	if counts == "" {
		b.Skip("set FENCEGATE_SEED_WORKERS (e.g. 10000,20000) to run the seed-scale benchmark")
	}
	secs := seedEnvInt(b, "FENCEGATE_SEED_SECONDS", 30, 1)
	variants := []string{"lockclient", "mutex-own", "mutex"}
	if s := os.Getenv("FENCEGATE_SEED_VARIANTS"); s != "" {
		variants = strings.Split(s, ",")
		for _, v := range variants {
			if !slices.Contains([]string{"lockclient", "lockclient-half", "mutex", "mutex-own"}, v) {
				b.Fatalf("FENCEGATE_SEED_VARIANTS: unknown variant %q", v)
			}
		}
	}
	for i, f := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("FENCEGATE_SEED_WORKERS: %q is not a positive count", f)
		}
		for k := range variants {
			v := variants[(i+k)%len(variants)]
			settle(b)
			b.Run(fmt.Sprintf("workers=%d/%s", n, v), func(b *testing.B) {
				runSeed(b, v, n, time.Duration(secs)*time.Second)
			})
		}
	}
}

// settle waits, before each variant, until the machine is quiet: the previous
// variant's garbage collected and returned, and the 1-minute load average under
// seedSettleLoad (or seedSettleMax passed; FENCEGATE_SEED_SETTLE sets it in
// seconds, for a machine that other work keeps busy). Without it the variant that ran first did best whatever
// it was: at 20,000 workers the same variant kept every session when it ran first
// and lost them all when it ran second.
func settle(b *testing.B) {
	runtime.GC()
	debug.FreeOSMemory()
	start := time.Now()
	limit := time.Duration(seedEnvInt(b, "FENCEGATE_SEED_SETTLE", int(seedSettleMax/time.Second), 0)) * time.Second
	for loadAvg() > seedSettleLoad && time.Since(start) < limit {
		time.Sleep(5 * time.Second)
	}
	// Printed, not logged: a parent benchmark's log is not shown.
	fmt.Printf("seed-scale: settled for %v, load average %.2f\n", time.Since(start).Round(time.Second), loadAvg())
}

const (
	seedSettleLoad = 1.5
	seedSettleMax  = 5 * time.Minute
	seedConns      = 16
	seedRate       = 1000 // jobs/s offered, unless FENCEGATE_SEED_RATE says otherwise
	seedAccounts   = 100000
	seedHold       = 50 * time.Millisecond
	seedWarmRate   = 2000 // sessions started per second before the measured time
	seedJobLimit   = 30 * time.Second
)

// seedWorker is one worker's lock service: a job through it takes and releases
// account, returning the time spent in acquire plus release.
type seedWorker interface {
	job(ctx context.Context, account string) (time.Duration, error)
	lost() bool // its session was lost (lockclient: counted by the observer instead)
	close()     // ends the session (revokes its lease)
}

type lcWorker struct{ c *lockclient.Client }

func (w lcWorker) job(ctx context.Context, account string) (time.Duration, error) {
	t0 := time.Now()
	l, err := w.c.Acquire(ctx, account)
	if err != nil {
		return 0, err
	}
	d := time.Since(t0)
	time.Sleep(seedHold)
	t1 := time.Now()
	err = l.Release(ctx)
	return d + time.Since(t1), err
}

func (lcWorker) lost() bool { return false }

func (w lcWorker) close() { w.c.Close() }

// mxWorker is a concurrency.Session and its Mutexes; lease, when set, is the
// session's own lessor, closed with it.
type mxWorker struct {
	s     *concurrency.Session
	lease clientv3.Lease
}

func (w mxWorker) job(ctx context.Context, account string) (time.Duration, error) {
	m := concurrency.NewMutex(w.s, "/seed/"+account)
	t0 := time.Now()
	if err := m.Lock(ctx); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	time.Sleep(seedHold)
	t1 := time.Now()
	err := m.Unlock(ctx)
	return d + time.Since(t1), err
}

func (w mxWorker) lost() bool { return isClosed(w.s.Done()) }

func (w mxWorker) close() {
	w.s.Close()
	if w.lease != nil {
		w.lease.Close()
	}
}

// lossCounter is the Observer of every lockclient worker: it counts
// lost sessions and nothing else.
type lossCounter struct{ n, started atomic.Int64 }

func (*lossCounter) Acquired(string, time.Duration, error)                {}
func (*lossCounter) Ended(string, fence.Token, time.Duration, error)      {}
func (*lossCounter) KeepAlive(time.Duration, error)                       {}
func (*lossCounter) Retried(string, error)                                {}
func (*lossCounter) TermBegun(string, fence.Token)                        {}
func (*lossCounter) TermEnded(string, fence.Token, time.Duration, string) {}
func (c *lossCounter) Session(_ int, err error) {
	if err == nil {
		c.started.Add(1)
	} else {
		c.n.Add(1)
	}
}

func runSeed(b *testing.B, variant string, n int, measure time.Duration) {
	cl := locktest.StartCluster(b, 3)
	conns := make([]*clientv3.Client, seedEnvInt(b, "FENCEGATE_SEED_CONNS", seedConns, 1))
	for i := range conns {
		conns[i] = cl.Client(b)
	}
	eps := cl.Endpoints()
	c0, e0 := clientUsage(), etcdUsage(b, eps)
	losses := &lossCounter{}
	workers := startSeedWorkers(b, variant, n, conns, losses)
	c1, e1 := clientUsage(), etcdUsage(b, eps)
	defer closeSeedWorkers(workers)
	term0, started0 := cl.Term(), losses.started.Load()

	var stopProfile func()
	if dir := os.Getenv("FENCEGATE_SEED_PROFILE"); dir != "" {
		stopProfile = startProfile(b, filepath.Join(dir, fmt.Sprintf("seed-%d-%s.cpu.pprof", n, variant)))
	}
	cpu0, eu0 := processCPU(), etcdUsage(b, eps)
	r := offerJobs(b, workers, measure, seedEnvInt(b, "FENCEGATE_SEED_RATE", seedRate, 0))
	eu := etcdUsage(b, eps)
	cpu, ecpu := processCPU()-cpu0, eu.cpu-eu0.cpu
	if stopProfile != nil {
		stopProfile()
	}
	lost := losses.n.Load()
	for _, w := range workers {
		if w.lost() {
			lost++
		}
	}
	b.ReportMetric(r.rate(), "jobs/s")
	b.ReportMetric(r.pct(0.5), "p50-ms")
	b.ReportMetric(r.pct(0.99), "p99-ms")
	b.ReportMetric(float64(r.errors.Load()), "errors")
	b.ReportMetric(float64(lost), "sessions-lost")
	if !strings.HasPrefix(variant, "mutex") {
		b.ReportMetric(float64(losses.started.Load()-started0), "sessions-granted")
	}
	b.ReportMetric(float64(cl.Term()-term0), "elections")
	b.ReportMetric((c1.goroutines-c0.goroutines)/float64(n), "client-goroutines/worker")
	b.ReportMetric((e1.goroutines-e0.goroutines)/float64(n), "etcd-goroutines/worker")
	b.ReportMetric((c1.heap-c0.heap)/float64(n)/1024, "client-heap-KiB/worker")
	b.ReportMetric((e1.heap-e0.heap)/float64(n)/1024, "etcd-heap-KiB/worker")
	b.ReportMetric((eu.renewals-eu0.renewals)/r.elapsed.Seconds(), "renewals/s")
	if ka := eu.kaRecv - eu0.kaRecv; ka > 0 {
		// A follower forwards each keepalive it receives to the leader (an HTTP
		// request between members), so where they land is part of their cost.
		b.ReportMetric(100*(eu.kaLeader-eu0.kaLeader)/ka, "keepalives-at-leader-%")
	}
	b.ReportMetric((eu.kaStreams-eu0.kaStreams)/r.elapsed.Seconds(), "ka-streams-opened/s")
	if r.pairs > 0 {
		b.ReportMetric(ecpu.Seconds()/(float64(r.pairs)/1000), "etcd-cpu-s/1000jobs")
	}
	if rn := (eu.renewals - eu0.renewals) / r.elapsed.Seconds(); rn > 0 {
		b.ReportMetric(1e6*ecpu.Seconds()/r.elapsed.Seconds()/rn, "etcd-cpu-us/renewal")
	}
	b.ReportMetric(loadAvg(), "loadavg-1m")
	// The clients (this process) and the three members (their processes).
	b.ReportMetric(cpu.Seconds()/r.elapsed.Seconds(), "client-cpu-cores")
	b.ReportMetric(ecpu.Seconds()/r.elapsed.Seconds(), "etcd-cpu-cores")
	if cl.Term() == term0 { // the same leader throughout
		b.ReportMetric((eu.leaderCPU-eu0.leaderCPU).Seconds()/r.elapsed.Seconds(), "etcd-leader-cpu-cores")
	}
	b.ReportMetric((cpu+ecpu).Seconds()/r.elapsed.Seconds(), "cpu-cores")
	if r.errors.Load() > 0 {
		b.Logf("%d jobs failed; first: %v", r.errors.Load(), r.firstErr.Load())
	}
}

// startSeedWorkers makes n workers and starts their sessions at seedWarmRate
// (each worker does one job on an account of its own), as servers coming up.
func startSeedWorkers(b *testing.B, variant string, n int, conns []*clientv3.Client, losses *lossCounter) []seedWorker {
	workers := make([]seedWorker, n)
	var wg sync.WaitGroup
	var failed atomic.Int64
	sem := make(chan struct{}, 256)
	// At most seedWarmRate a second, and over at least a renewal interval, so
	// that renewals are spread as those of servers started at different times.
	rate := min(float64(seedWarmRate), float64(n)/(defaultTTL/3+time.Second).Seconds())
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var w seedWorker
			var err error
			for range 5 { // a Session is refused when etcd is slow: a server would retry
				if w, err = newSeedWorker(variant, conns[i%len(conns)], losses); err == nil {
					break
				}
			}
			if err == nil {
				ctx, cancel := context.WithTimeout(b.Context(), seedJobLimit)
				_, err = w.job(ctx, fmt.Sprintf("warmup-%d", i))
				cancel()
			}
			if err != nil {
				failed.Add(1)
			}
			workers[i] = w
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Logf("%d of %d workers failed their first job (etcd timed out)", f, n)
	}
	for _, w := range workers {
		if w == nil {
			b.Fatalf("a worker could not start a session in 5 tries")
		}
	}
	time.Sleep(5 * time.Second) // renewals spread out, the warm-up's garbage collected
	return workers
}

func newSeedWorker(variant string, cli *clientv3.Client, losses *lossCounter) (seedWorker, error) {
	switch variant {
	case "mutex":
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(defaultTTL/time.Second)))
		if err != nil {
			return nil, err
		}
		return mxWorker{s: s}, nil
	case "mutex-own":
		own := ownLessor(cli)
		s, err := concurrency.NewSession(own, concurrency.WithTTL(int(defaultTTL/time.Second)))
		if err != nil {
			own.Lease.Close()
			return nil, err
		}
		return mxWorker{s: s, lease: own.Lease}, nil
	}
	opts := []lockclient.Option{lockclient.WithObserver(losses)}
	if variant == "lockclient-half" {
		opts = append(opts, lockclient.WithRenewInterval(defaultTTL/2))
	}
	c, err := lockclient.New(cli, opts...)
	if err != nil {
		return nil, err
	}
	return lcWorker{c: c}, nil
}

// ownLessor returns a client that shares cli's connection, KV and watcher but
// has a lessor of its own, so that a session on it renews on its own keepalive
// stream, as a server with its own clientv3 would. (clientv3.NewLease is what
// clientv3.New uses; time.Second there means its default first-keepalive timeout.)
func ownLessor(cli *clientv3.Client) *clientv3.Client {
	c := clientv3.NewCtxClient(cli.Ctx(), clientv3.WithZapLogger(cli.GetLogger()))
	c.KV, c.Watcher, c.Cluster, c.Maintenance = cli.KV, cli.Watcher, cli.Cluster, cli.Maintenance
	c.Lease = clientv3.NewLeaseFromLeaseClient(clientv3.RetryLeaseClient(cli), c, time.Second)
	return c
}

// seedResult is what the measured time did.
type seedResult struct {
	result
	firstErr atomic.Value
}

// offerJobs starts seedRate jobs a second for d, each on a random worker and a
// random account, each in its own goroutine (open loop: a slow job delays no
// other's start), and waits for all.
func offerJobs(b *testing.B, workers []seedWorker, d time.Duration, rate int) *seedResult {
	r := &seedResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	total := int(d.Seconds() * float64(rate))
	r.lat = make([]time.Duration, 0, total)
	start := time.Now()
	for j := range total {
		if wait := time.Until(start.Add(time.Duration(j) * time.Second / time.Duration(rate))); wait > 0 {
			time.Sleep(wait)
		}
		w := workers[rand.IntN(len(workers))]
		account := "account-" + strconv.Itoa(rand.IntN(seedAccounts))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(b.Context(), seedJobLimit)
			defer cancel()
			lat, err := w.job(ctx, account)
			if err != nil {
				if r.errors.Add(1) == 1 {
					r.firstErr.Store(err)
				}
				return
			}
			mu.Lock()
			r.pairs++
			r.lat = append(r.lat, lat)
			mu.Unlock()
		})
	}
	if total == 0 {
		time.Sleep(d) // idle: the sessions' renewals alone
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}

// seedEnvInt is the environment variable name as a count of at least least, or
// def when it is unset: FENCEGATE_SEED_SECONDS, FENCEGATE_SEED_CONNS (the etcd
// connections the workers share, worker i on connection i mod count; as many as
// workers gives each its own, as separate servers have) and FENCEGATE_SEED_RATE
// (0 measures idle sessions: what the renewals alone cost).
func seedEnvInt(b *testing.B, name string, def, least int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a whole number, %d or more", name, s, least)
	}
	return n
}

// closeSeedWorkers ends every worker's session, a few at a time, while the
// cluster still runs, so that nothing of one variant runs into the next.
func closeSeedWorkers(workers []seedWorker) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, w := range workers {
		if w == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w.close()
		})
	}
	wg.Wait()
}
