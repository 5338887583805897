package lockclient_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver/delayproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// delayedClient returns a new etcd client whose every round trip to srv costs
// 2 x oneWay more, through a delaying proxy.
func delayedClient(t testing.TB, srv *locktest.Cluster, oneWay time.Duration) *clientv3.Client {
	t.Helper()
	u, err := url.Parse(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	p, err := delayproxy.Start(u.Host, oneWay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Addr()}, DialTimeout: time.Minute, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestClient_Acquire_slowNetwork waits for a lock across a round trip of 30 %
// of the shortest lease (300 ms), on a new connection each round: once the holder
// nearby releases it, the far client holds the place it wrote once in line (the
// wait wrote nothing else), keeps it over renewals, and loses no session.
func TestClient_Acquire_slowNetwork(t *testing.T) {
	srv := locktest.Start(t)
	ep := srv.Endpoints()[0]
	cli := srv.Client(t)
	near := newClient(t, cli, lockclient.WithTTL(testTTL))
	for round := range 3 {
		log := newKALog()
		far := newClient(t, delayedClient(t, srv, testTTL*3/20), lockclient.WithTTL(testTTL), lockclient.WithObserver(log))
		held := mustAcquire(t, near, "job")
		base := watchers(t, ep)
		got := make(chan *lockclient.Lock, 1)
		errc := make(chan error, 1)
		go func() {
			l, err := far.Acquire(t.Context(), "job")
			if err != nil {
				errc <- err
				return
			}
			got <- l
		}()
		waitWatchers(t, ep, base+1) // the far client waits
		info, err := near.Holder(t.Context(), "job")
		if err != nil || len(info.Waiting) != 1 {
			t.Fatalf("round %d: Holder = %+v, %v; want the far client waiting", round, info, err)
		}
		place := info.Waiting[0].Token
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		var l *lockclient.Lock
		select {
		case err := <-errc:
			t.Fatalf("round %d: far Acquire: %v", round, err)
		case l = <-got:
		}
		if l.Token() != place || place != held.Token()+1 {
			t.Errorf("round %d: far client granted token %d, its place %d, the holder's token %d: want its place, the next revision (one write while waiting, none burnt)",
				round, l.Token(), place, held.Token())
		}
		for n := 0; n < 3 && !isClosed(l.Done()); n++ {
			select { // the bound only keeps a broken build from hanging the suite
			case <-log.notify:
			case <-l.Done():
			case <-time.After(2 * time.Minute):
				t.Fatalf("round %d: no renewal confirmed", round)
			}
		}
		if isClosed(l.Done()) {
			t.Errorf("round %d: far client's lock ended: %v", round, context.Cause(l.Context()))
		}
		if _, lost := log.sessions(); lost > 0 {
			t.Errorf("round %d: far client lost %d sessions", round, lost)
		}
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := l.Release(rctx); err != nil {
			t.Errorf("round %d: release: %v", round, err)
		}
		cancel()
	}
}

// BenchmarkAcquireRTT hands a lock from a holder next to etcd to a waiter
// across a round trip of 0, 50, 150 or 300 ms, with the shortest lease (2 s):
// the time from the release to the waiter's grant (in ms and in round trips),
// the waiter's first acquire on a new connection, the revisions burnt between
// the release and the grant, and the sessions the waiter lost. Run it with
// -benchtime 10x.
func BenchmarkAcquireRTT(b *testing.B) {
	srv := locktest.Start(b)
	ep := srv.Endpoints()[0]
	cli := srv.Client(b)
	near := newClient(b, cli, lockclient.WithTTL(testTTL))
	for _, rtt := range []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%dms", rtt.Milliseconds()), func(b *testing.B) {
			log := newKALog()
			far := newClient(b, delayedClient(b, srv, rtt/2), lockclient.WithTTL(testTTL), lockclient.WithObserver(log))
			start := time.Now()
			if err := mustAcquire(b, far, "warm").Release(b.Context()); err != nil {
				b.Fatal(err)
			}
			cold := time.Since(start)
			var handoff time.Duration
			var burnt int64
			for i := 0; i < b.N; i++ {
				d, n := handOff(b, cli, ep, near, far)
				handoff += d
				burnt += n
			}
			ms := float64(handoff.Microseconds()) / 1000 / float64(b.N)
			b.ReportMetric(ms, "handoff-ms")
			if rtt > 0 {
				b.ReportMetric(ms/float64(rtt.Milliseconds()), "handoff-RTTs")
			}
			b.ReportMetric(float64(cold.Milliseconds()), "cold-acquire-ms")
			b.ReportMetric(float64(burnt)/float64(b.N), "burnt-revisions/op")
			_, lost := log.sessions()
			b.ReportMetric(float64(lost), "sessions-lost")
		})
	}
}

// handOff has near take "job" and far wait for it, then near release it: it
// returns the time from the release to far's grant and the revisions burnt.
func handOff(b *testing.B, cli *clientv3.Client, ep string, near, far *lockclient.Client) (time.Duration, int64) {
	held := mustAcquire(b, near, "job")
	base := watchers(b, ep)
	got := make(chan *lockclient.Lock, 1)
	go func() {
		l, err := far.Acquire(b.Context(), "job")
		if err != nil {
			b.Error(err)
		}
		got <- l
	}()
	waitWatchers(b, ep, base+1)
	wctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	deletes := cli.Watch(wctx, defaultPrefix+"job", clientv3.WithRev(int64(held.Token())+1), clientv3.WithFilterPut())
	start := time.Now()
	if err := held.Release(b.Context()); err != nil {
		b.Fatal(err)
	}
	l := <-got
	d := time.Since(start)
	if l == nil {
		b.FailNow()
	}
	wr := <-deletes
	if len(wr.Events) == 0 {
		b.Fatalf("watch of the release: %v", wr.Err())
	}
	burnt := int64(l.Token()) - wr.Events[0].Kv.ModRevision - 1
	if err := l.Release(b.Context()); err != nil {
		b.Fatal(err)
	}
	return d, burnt
}
