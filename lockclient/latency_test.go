package lockclient_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/delayproxy"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// delayedClient returns a new etcd client whose every round trip to srv costs
// 2 x oneWay more, through a delaying proxy.
func delayedClient(t *testing.T, srv *locktest.Cluster, oneWay time.Duration) *clientv3.Client {
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

// TestClient_Acquire_slowNetwork waits for a lock across a 600 ms round trip
// with the shortest lease, on a new connection each round: once the holder
// nearby releases it, the far client is granted the very next revision (no
// attempt burnt one), keeps it over renewals, and loses no session.
func TestClient_Acquire_slowNetwork(t *testing.T) {
	srv := locktest.Start(t)
	ep := srv.Endpoints()[0]
	cli := srv.Client(t)
	near := newClient(t, cli, lockclient.WithTTL(testTTL))
	for round := range 3 {
		log := newKALog()
		far := newClient(t, delayedClient(t, srv, 300*time.Millisecond), lockclient.WithTTL(testTTL), lockclient.WithObserver(log))
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
		deletes := cli.Watch(t.Context(), lockclient.DefaultPrefix+"job", clientv3.WithRev(int64(held.Token())+1), clientv3.WithFilterPut())
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		wr := <-deletes
		if len(wr.Events) == 0 {
			t.Fatalf("watch of the release: %v", wr.Err())
		}
		released := wr.Events[0].Kv.ModRevision
		var l *lockclient.Lock
		select {
		case err := <-errc:
			t.Fatalf("round %d: far Acquire: %v", round, err)
		case l = <-got:
		}
		if l.Token() != fence.Token(released+1) {
			t.Errorf("round %d: far client granted token %d; the release was revision %d: %d revisions burnt",
				round, l.Token(), released, int64(l.Token())-released-1)
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
