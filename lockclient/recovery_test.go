package lockclient_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestClient_recoversAfterOutage runs workers, each with a Client of its own,
// taking and releasing a few hot locks on a 3-member cluster; then stops two
// members (no quorum: nothing is renewed or granted) for longer than the TTL, so
// that every session is lost, and brings them back. Every worker acquires again
// with the same Client within a generous bound (the expected time is about two
// TTLs: an old lease outlives the outage by up to a TTL, then the backoff), no
// two holders of a name overlap and no token is granted twice.
func TestClient_recoversAfterOutage(t *testing.T) {
	const workers = 24
	cl := locktest.StartCluster(t, 3)
	rec := &recorder{}
	conns := []*clientv3.Client{cl.Client(t), cl.Client(t), cl.Client(t), cl.Client(t)}
	clients := make([]*lockclient.Client, workers)
	for i := range clients {
		clients[i] = newClient(t, conns[i%len(conns)], lockclient.WithTTL(testTTL), lockclient.WithObserver(rec))
	}
	// Each worker's last grant, in nanoseconds since start.
	start := time.Now()
	last := make([]atomic.Int64, workers)
	ex := newExclusion(t)
	names := []string{"a", "b", "c", "d", "e", "f"}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for w := range workers {
		wg.Go(func() { recoveryWorker(ctx, ex, clients[w], names, w, &last[w], start) })
	}

	allSince := func(t0 time.Time, what string) time.Duration {
		t.Helper()
		for {
			done := 0
			for w := range workers {
				if start.Add(time.Duration(last[w].Load())).After(t0) {
					done++
				}
			}
			if done == workers {
				return time.Since(t0)
			}
			if time.Since(t0) > 30*testTTL {
				t.Fatalf("%s: %d of %d workers acquired within %v", what, done, workers, 30*testTTL)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	allSince(start, "before the outage")

	lead := cl.WaitLeader(t)
	other := (lead + 1) % len(cl.Endpoints())
	cl.Stop(lead)
	cl.Stop(other)
	waitLost(t, rec, workers) // every Client's deadline passes
	cl.Restart(lead)
	cl.Restart(other)
	back := time.Now()
	took := allSince(back, "after the outage")
	t.Logf("every worker acquired again %v after quorum returned (TTL %v)", took, testTTL)
	started, lost := rec.sessionCounts()
	t.Logf("%d grants; sessions started %d, lost %d", ex.count(), started, len(lost))
	if started < 2*workers {
		t.Errorf("%d sessions started, want at least %d (each Client a second one)", started, 2*workers)
	}
}

// recoveryWorker takes and releases names with one Client until ctx ends,
// storing the time of its last grant since start in last.
func recoveryWorker(ctx context.Context, ex *exclusion, c *lockclient.Client, names []string, w int, last *atomic.Int64, start time.Time) {
	for k := 0; ctx.Err() == nil; k++ {
		name := names[(w+k)%len(names)]
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Acquire(actx, name)
		cancel()
		if err != nil {
			time.Sleep(50 * time.Millisecond) // etcd has no quorum: try again
			continue
		}
		ex.enter(name, l.Token())
		last.Store(int64(time.Since(start)))
		time.Sleep(time.Duration(k%3) * time.Millisecond)
		ex.leave(name, l.Token())
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l.Release(rctx) // a failed release is retried by the Client, or goes with the lease
		cancel()
	}
}

// waitLost waits until rec has seen n sessions lost.
func waitLost(t *testing.T, rec *recorder, n int) {
	t.Helper()
	for down := time.Now(); ; {
		_, lost := rec.sessionCounts()
		if len(lost) >= n {
			return
		}
		if time.Since(down) > 30*testTTL {
			t.Fatalf("%d of %d sessions lost %v into the outage", len(lost), n, 30*testTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
