package lockclient_test

import (
	"fmt"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver/delayproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestRenewalDue is the cadence by need, without jitter: a third of the TTL
// while a lock is held, half of it while none is, a quarter after an
// unanswered idle renewal, and the busy cadence for an idle session while etcd
// answers slowly; a session that becomes busy long after its last renewal is
// due at once.
func TestRenewalDue(t *testing.T) {
	last := time.Unix(1000, 0)
	third := defaultTTL / 3
	tests := []struct {
		name                 string
		opts                 []lockclient.Option
		answered, slow, busy bool
		want                 time.Duration // after last
	}{
		{name: "busy", answered: true, busy: true, want: third},
		{name: "idle", answered: true, want: defaultTTL / 2},
		{name: "idle, etcd slow", answered: true, slow: true, want: third},
		{name: "busy, unanswered", busy: true, want: third},
		{name: "idle, unanswered", want: defaultTTL / 4},
		{name: "idle, unanswered, etcd slow", slow: true, want: third},
		{name: "long interval: idle as busy", opts: []lockclient.Option{lockclient.WithRenewInterval(6 * time.Second)}, answered: true, want: 6 * time.Second},
		{name: "long interval, idle, unanswered", opts: []lockclient.Option{lockclient.WithRenewInterval(6 * time.Second)}, want: 2 * time.Second},
		{name: "short interval, idle", opts: []lockclient.Option{lockclient.WithRenewInterval(time.Second)}, answered: true, want: 5 * time.Second},
		{name: "short interval, idle, unanswered", opts: []lockclient.Option{lockclient.WithRenewInterval(time.Second)}, want: time.Second},
		{name: "TTL 4s, idle", opts: []lockclient.Option{lockclient.WithTTL(4 * time.Second)}, answered: true, want: 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lockclient.RenewalDue(tt.opts, last, tt.answered, tt.slow, tt.busy)
			if err != nil {
				t.Fatal(err)
			}
			if got.Sub(last) != tt.want {
				t.Fatalf("due %v after the last keepalive, want %v", got.Sub(last), tt.want)
			}
		})
	}
	t.Run("idle retry before the deadline", func(t *testing.T) {
		// An idle renewal and its retry both go out before the deadline that the
		// renewal before them set, with time left for an answer.
		first, _ := lockclient.RenewalDue(nil, last, true, false, false)
		retry, _ := lockclient.RenewalDue(nil, first, false, false, false)
		if deadline := last.Add(defaultTTL); !retry.Before(deadline) || deadline.Sub(retry) < defaultTTL/5 {
			t.Fatalf("retry %v after the last renewal, deadline %v after it", retry.Sub(last), defaultTTL)
		}
	})
	t.Run("busy long after the last renewal", func(t *testing.T) {
		now := last.Add(defaultTTL * 2 / 5) // an idle renewal nearly due
		due, _ := lockclient.RenewalDue(nil, last, true, false, true)
		if due.After(now) {
			t.Fatalf("a lock taken %v after the last renewal: next renewal %v later, want at once", now.Sub(last), due.Sub(now))
		}
	})
}

// kaLog is an Observer that keeps the time of every confirmed renewal and
// counts sessions started and lost.
type kaLog struct {
	mu            sync.Mutex
	renewed       []time.Time
	started, lost int
	notify        chan struct{} // a value after each confirmed renewal
}

func newKALog() *kaLog { return &kaLog{notify: make(chan struct{}, 1)} }

func (*kaLog) Acquired(string, time.Duration, error)                {}
func (*kaLog) Ended(string, fence.Token, time.Duration, error)      {}
func (*kaLog) Retried(string, error)                                {}
func (*kaLog) TermBegun(string, fence.Token)                        {}
func (*kaLog) TermEnded(string, fence.Token, time.Duration, string) {}

func (k *kaLog) KeepAlive(_ time.Duration, err error) {
	if err != nil {
		return
	}
	k.mu.Lock()
	k.renewed = append(k.renewed, time.Now())
	k.mu.Unlock()
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

func (k *kaLog) Session(_ int, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err == nil {
		k.started++
	} else {
		k.lost++
	}
}

func (k *kaLog) sessions() (started, lost int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.started, k.lost
}

// next waits for the next confirmed renewal and returns when it was reported;
// the bound only keeps a broken build from hanging the suite.
func (k *kaLog) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case <-k.notify: // an earlier one
	default:
	}
	select {
	case <-k.notify:
	case <-time.After(2 * time.Minute):
		t.Fatal("no renewal confirmed")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.renewed[len(k.renewed)-1]
}

// holdDeadline watches c's session deadline for d: it must never pass, and l
// (when not nil) must stay held.
func holdDeadline(t *testing.T, c *lockclient.Client, l *lockclient.Lock, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		deadline := lockclient.SessionDeadline(c)
		if now := time.Now(); !now.Before(deadline) {
			t.Fatalf("session deadline passed %v ago", now.Sub(deadline))
		}
		if l != nil && isClosed(l.Done()) {
			t.Fatalf("lock lost: %v", l.Context().Err())
		}
	}
}

// TestClient_cadence_lockJustBeforeIdleRenewal takes a lock just before an
// idle session's renewal is due (more than a busy interval after the last one):
// the session switches to the busy cadence at once, and its deadline never
// passes while the lock is held; released, the session goes on idle.
func TestClient_cadence_lockJustBeforeIdleRenewal(t *testing.T) {
	srv := shared.Cluster(t)
	log := newKALog()
	c := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL), lockclient.WithObserver(log))
	if err := mustAcquire(t, c, "warm").Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	log.next(t)
	at := log.next(t) // an idle renewal; the next is due half a TTL after it was sent
	time.Sleep(time.Until(at.Add(testTTL * 2 / 5)))
	l := mustAcquire(t, c, "job")
	holdDeadline(t, c, l, 3*testTTL)
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	holdDeadline(t, c, nil, 2*testTTL)
	if started, lost := log.sessions(); started != 1 || lost != 0 {
		t.Fatalf("sessions started %d, lost %d; want 1 and 0", started, lost)
	}
}

// TestClient_cadence_releaseJustAfterBusyRenewal releases a lock just after a
// busy renewal: the session switches to the idle cadence, and its deadline
// never passes; the next lock is taken under the same session.
func TestClient_cadence_releaseJustAfterBusyRenewal(t *testing.T) {
	srv := shared.Cluster(t)
	log := newKALog()
	c := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL), lockclient.WithObserver(log))
	for round := range 3 {
		l := mustAcquire(t, c, "job")
		log.next(t)
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
		holdDeadline(t, c, nil, 2*testTTL)
	}
	if started, lost := log.sessions(); started != 1 || lost != 0 {
		t.Fatalf("sessions started %d, lost %d; want 1 and 0", started, lost)
	}
}

// TestClient_cadence_noGoroutinePerLock switches a session between the
// cadences with hundreds of locks: the goroutine count does not grow with them.
func TestClient_cadence_noGoroutinePerLock(t *testing.T) {
	srv := shared.Cluster(t)
	log := newKALog()
	c := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL), lockclient.WithObserver(log))
	if err := mustAcquire(t, c, "warm").Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	settle := func() int {
		runtime.GC()
		time.Sleep(100 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	log.next(t)
	before := settle()
	const n = 300
	for round := range 3 {
		locks := make([]*lockclient.Lock, n)
		for i := range locks {
			locks[i] = mustAcquire(t, c, fmt.Sprintf("job-%d", i))
		}
		log.next(t) // a busy renewal
		if grown := settle() - before; grown >= n/10 {
			t.Fatalf("round %d: goroutines grew by %d while holding %d locks", round, grown, n)
		}
		for _, l := range locks {
			if err := l.Release(t.Context()); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		log.next(t) // an idle one
		if grown := settle() - before; grown >= n/10 {
			t.Fatalf("round %d: goroutines grew by %d after releasing %d locks", round, grown, n)
		}
	}
	if _, lost := log.sessions(); lost != 0 {
		t.Fatalf("%d sessions lost", lost)
	}
}

// TestClient_cadence_degradation slows etcd down as an overload would (every
// byte each way delayed by a proxy, more and more, up to round trips of 60 %
// of the TTL, held there), then lets it recover, with two groups of idle
// Clients on it at once: one renewing by need, one as every session did before
// (the busy cadence always). Renewing by need must lose no more sessions than
// the busy cadence: an idle session renews as a busy one while etcd is slow,
// because its later renewal leaves less time for a slow answer (an idle
// session that kept half-TTL renewals would lose its lease here: its answers
// would come after its deadline).
func TestClient_cadence_degradation(t *testing.T) {
	const (
		ttl     = 6 * time.Second
		clients = 10
		maxRTT  = ttl * 6 / 10
	)
	srv := locktest.Start(t)
	u, err := url.Parse(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := delayproxy.Start(u.Host, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	byNeed, busy := newKALog(), newKALog()
	for i := range 2 * clients {
		log := byNeed
		if i%2 == 1 {
			log = busy
		}
		c := newClient(t, cli, lockclient.WithTTL(ttl), lockclient.WithObserver(log))
		if i%2 == 1 {
			lockclient.RenewAlwaysBusy(c)
		}
		if err := mustAcquire(t, c, fmt.Sprintf("warm-%d", i)).Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl) // the sessions idle, their renewals spread out

	// Overload: the round trip grows to maxRTT over two TTLs, stays there for
	// 1.5 TTLs; then the normal load for two TTLs.
	const steps = 40
	for i := 1; i <= steps; i++ {
		p.SetDelay(maxRTT / 2 * time.Duration(i) / steps)
		time.Sleep(2 * ttl / steps)
	}
	time.Sleep(ttl * 3 / 2)
	p.SetDelay(0)
	time.Sleep(2 * ttl)

	_, lostByNeed := byNeed.sessions()
	_, lostBusy := busy.sessions()
	t.Logf("sessions lost: renewing by need %d of %d, always busy %d of %d", lostByNeed, clients, lostBusy, clients)
	if lostByNeed > lostBusy {
		t.Fatalf("renewing by need lost %d sessions, the busy cadence %d", lostByNeed, lostBusy)
	}
}

// TestClient_keepalivesOnLeader runs sessions on a 3-member cluster through one
// shared connection, which balances their streams over the members: most of
// their keepalives must reach the leader (a follower forwards each one to it),
// where a third would without homing.
func TestClient_keepalivesOnLeader(t *testing.T) {
	const sessions = 30
	cl := locktest.StartCluster(t, 3)
	cli := cl.Client(t)
	for i := range sessions {
		c := newClient(t, cli, lockclient.WithTTL(testTTL))
		mustAcquire(t, c, fmt.Sprintf("job-%d", i))
	}
	time.Sleep(2 * testTTL) // the streams on the members they stay on
	lead := cl.WaitLeader(t)
	received := func() (atLeader, all float64) {
		for i, ep := range cl.Endpoints() {
			m, err := scrapeMetrics(t.Context(), ep+"/metrics")
			if err != nil {
				t.Fatalf("member %d metrics: %v", i, err)
			}
			all += m[kaRecvMetric]
			if i == lead {
				atLeader += m[kaRecvMetric]
			}
		}
		return atLeader, all
	}
	l0, a0 := received()
	time.Sleep(2 * testTTL)
	l1, a1 := received()
	if cl.WaitLeader(t) != lead {
		t.Skip("the leader changed during the test")
	}
	share := (l1 - l0) / (a1 - a0)
	t.Logf("%.0f of %.0f keepalives reached the leader", l1-l0, a1-a0)
	if share < 0.6 {
		t.Fatalf("%.0f%% of the keepalives reached the leader, want most", 100*share)
	}
}

// TestClient_sessionLost_idle revokes, from outside, the session of a Client
// that holds no lock (renewing at the idle cadence): its next renewal finds
// the lease gone, the session is lost, and the Client's next Acquire starts a
// new one.
func TestClient_sessionLost_idle(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	admin := srv.Client(t)
	rec := &recorder{}
	c := newClient(t, srv.Client(t), lockclient.WithTTL(roomTTL), lockclient.WithObserver(rec))
	a := mustAcquire(t, c, "a")
	resp, err := admin.Get(t.Context(), defaultPrefix+"a")
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("Get: %v, %d keys", err, len(resp.Kvs))
	}
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	waitLost(t, rec, 1)
	b := mustAcquire(t, c, "b")
	if b.Token() <= a.Token() {
		t.Errorf("new token %d is not above the old one %d", b.Token(), a.Token())
	}
	if started, lost := rec.sessionCounts(); started != 2 || len(lost) != 1 || lost[0] != 0 {
		t.Errorf("sessions started %d, lost %v; want 2 and [0]", started, lost)
	}
}
