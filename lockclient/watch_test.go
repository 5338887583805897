package lockclient_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver/delayproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func etcdClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// clientVia returns a client of srv's keys (its Prefix) that reaches etcd
// through p, closed when the test ends.
func clientVia(t testing.TB, srv *locktest.Cluster, p *delayproxy.Proxy) *clientv3.Client {
	t.Helper()
	return locktest.Namespace(etcdClient(t, "http://"+p.Addr()), srv.Prefix())
}

func nextEvent(t *testing.T, ch <-chan lockclient.Event) lockclient.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(2 * time.Minute):
		t.Fatal("no watch event")
	}
	return lockclient.Event{}
}

// wantEvent reads the next event and checks its type, token and flags.
func wantEvent(t *testing.T, ch <-chan lockclient.Event, typ lockclient.EventType, tok fence.Token, reread bool) lockclient.Event {
	t.Helper()
	ev := nextEvent(t, ch)
	if ev.Type != typ || ev.Holder.Token != tok || ev.Reread != reread {
		t.Fatalf("event %v %q token %d reread %v; want %v token %d reread %v", ev.Type, ev.Name, ev.Holder.Token, ev.Reread, typ, tok, reread)
	}
	return ev
}

// watchers reads an etcd member's count of open watchers from its metrics.
func watchers(t testing.TB, endpoint string) int {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatal("no etcd_debugging_mvcc_watcher_total in the member's metrics")
	return 0
}

// waitWatchers waits until the member counts n watchers.
func waitWatchers(t testing.TB, endpoint string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); watchers(t, endpoint) != n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("member counts %d watchers, want %d", watchers(t, endpoint), n)
		}
	}
}

// TestClient_Watch_events follows one name through every kind of change: a
// grant, a release, a Close (a release too), an operator's release
// by token and a Lead's term with its value; on one etcd watch, writing nothing.
func TestClient_Watch_events(t *testing.T) {
	srv := locktest.Start(t)
	ep := srv.Endpoints()[0]
	cli := srv.Client(t)
	c := newClient(t, cli)
	base := watchers(t, ep)
	before := revision(t, cli)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := c.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != lockclient.EventFree || !ev.Initial || ev.Name != "job" {
		t.Fatalf("first event %+v, want an initial EventFree", ev)
	}
	waitWatchers(t, ep, base+1)
	if after := revision(t, cli); after != before {
		t.Fatalf("revision %d after the watch started, %d before: the watch wrote", after, before)
	}

	a := newClient(t, srv.Client(t))
	la := mustAcquire(t, a, "job")
	if ev := wantEvent(t, ch, lockclient.EventTaken, la.Token(), false); ev.Holder.ClientID != a.ID() || ev.Initial || ev.Revision != int64(la.Token()) {
		t.Fatalf("taken event %+v, want a's grant at revision %d", ev, la.Token())
	}
	if err := la.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, lockclient.EventReleased, la.Token(), false)

	b := newClient(t, srv.Client(t))
	lb := mustAcquire(t, b, "job")
	wantEvent(t, ch, lockclient.EventTaken, lb.Token(), false)
	b.Close()
	wantEvent(t, ch, lockclient.EventReleased, lb.Token(), false)

	lc := mustAcquire(t, a, "job")
	wantEvent(t, ch, lockclient.EventTaken, lc.Token(), false)
	if err := c.Release(t.Context(), "job", lc.Token()); err != nil { // as fencectl release does
		t.Fatal(err)
	}
	wantEvent(t, ch, lockclient.EventReleased, lc.Token(), false)
	if n := watchers(t, ep); n != base+1 {
		t.Fatalf("%d watchers, want %d: one for the watch", n, base+1)
	}

	d := newClient(t, srv.Client(t))
	var term fence.Token
	err = leadOnce(t.Context(), d, "job", func(l *lockclient.Lock) error {
		term = l.Token()
		ev := wantEvent(t, ch, lockclient.EventTaken, l.Token(), false)
		if string(ev.Holder.Value) != "10.1.2.3:7000" {
			return fmt.Errorf("value %q", ev.Holder.Value)
		}
		return nil
	}, lockclient.WithValue([]byte("10.1.2.3:7000")))
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, lockclient.EventReleased, term, false)

	cancel()
	for range ch { // closed once ctx ended
	}
	waitWatchers(t, ep, base)
}

// TestClient_WatchPrefix reports only the names under the prefix, starting
// with those held.
func TestClient_WatchPrefix(t *testing.T) {
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	held := mustAcquire(t, c, "sched-a")
	ch, err := c.WatchPrefix(t.Context(), "sched-")
	if err != nil {
		t.Fatal(err)
	}
	if ev := wantEvent(t, ch, lockclient.EventTaken, held.Token(), false); !ev.Initial || ev.Name != "sched-a" {
		t.Fatalf("first event %+v, want sched-a's initial grant", ev)
	}
	mustAcquire(t, c, "other")
	lb := mustAcquire(t, c, "sched-b")
	if ev := wantEvent(t, ch, lockclient.EventTaken, lb.Token(), false); ev.Name != "sched-b" {
		t.Fatalf("event %+v, want sched-b", ev)
	}
	held.Release(t.Context())
	if ev := wantEvent(t, ch, lockclient.EventReleased, held.Token(), false); ev.Name != "sched-a" {
		t.Fatalf("event %+v, want sched-a released", ev)
	}
	for _, p := range []string{"a/b", "a\x00"} {
		if _, err := c.WatchPrefix(t.Context(), p); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("WatchPrefix(%q) = %v, want fence.ErrInvalidArgument", p, err)
		}
	}
	if _, err := c.Watch(t.Context(), ""); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("Watch(\"\") = %v, want fence.ErrInvalidArgument", err)
	}
	c.Close()
	for range ch { // Close ends the watch: its channel closes
	}
	noClientGoroutines(t)
	if _, err := c.Watch(t.Context(), "x"); !errors.Is(err, lockclient.ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
}

// TestClient_Watch_compacted cuts the watcher off, changes the holder twice
// and compacts etcd's history past its last event: when it reconnects it reads
// the state again and says so (Reread): the hold it knew ended, a new one began.
func TestClient_Watch_compacted(t *testing.T) {
	srv := locktest.Start(t)
	p := startCutProxy(t, srv.Endpoints()[0])
	w := newClient(t, etcdClient(t, "http://"+p.Addr()))
	ch, err := w.Watch(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, lockclient.EventFree, 0, false)
	cli := srv.Client(t)
	a := newClient(t, cli)
	l1 := mustAcquire(t, a, "job")
	wantEvent(t, ch, lockclient.EventTaken, l1.Token(), false)

	p.Cut()
	l1.Release(t.Context())
	l2 := mustAcquire(t, a, "job")
	l2.Release(t.Context())
	l3 := mustAcquire(t, a, "job")
	if _, err := cli.Compact(t.Context(), revision(t, cli)); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	ev := wantEvent(t, ch, lockclient.EventReleased, l1.Token(), true)
	if ev.Revision < int64(l3.Token()) {
		t.Fatalf("reread at revision %d, before the last grant %d", ev.Revision, l3.Token())
	}
	wantEvent(t, ch, lockclient.EventTaken, l3.Token(), true)
	// And it follows changes again as they come.
	l3.Release(t.Context())
	wantEvent(t, ch, lockclient.EventReleased, l3.Token(), false)
}

// TestClient_Watch_memberRestart: a follower watching through one member of
// three sees every term, in order, while that member is down and restarted;
// nothing is skipped or repeated.
func TestClient_Watch_memberRestart(t *testing.T) {
	t.Parallel()
	cl := locktest.StartCluster(t, 3)
	w := newClient(t, cl.MemberClient(t, 0))
	ch, err := w.Watch(t.Context(), "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, lockclient.EventFree, 0, false)
	cands := []*lockclient.Client{newClient(t, cl.Client(t), lockclient.WithTTL(6*time.Second)), newClient(t, cl.Client(t), lockclient.WithTTL(6*time.Second))}
	var terms []fence.Token
	lead := func(n int) {
		for i := range n {
			err := leadOnce(t.Context(), cands[i%2], "scheduler", func(l *lockclient.Lock) error {
				terms = append(terms, l.Token())
				return nil
			})
			if err != nil {
				t.Fatalf("Lead: %v", err)
			}
		}
	}
	lead(3)
	cl.Stop(0)
	lead(4)
	cl.Restart(0)
	lead(3)
	for _, tok := range terms {
		wantEvent(t, ch, lockclient.EventTaken, tok, false)
		wantEvent(t, ch, lockclient.EventReleased, tok, false)
	}
	select {
	case ev := <-ch:
		t.Fatalf("extra event %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestClient_Watch_releasedNotExpired watches 100 cycles of Acquire, Release
// and Close, and 20 of Acquire and Close: every end is a release, though each
// Close revokes the session lease right after, and the events are read only
// after the last Close. A holder cut off from etcd is then watched as expired.
func TestClient_Watch_releasedNotExpired(t *testing.T) {
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	w := newClient(t, cli)
	ch, err := w.Watch(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	wantEvent(t, ch, lockclient.EventFree, 0, false)
	var tokens []fence.Token
	for i := range 120 {
		c, err := lockclient.New(cli)
		if err != nil {
			t.Fatal(err)
		}
		l := mustAcquire(t, c, "job")
		tokens = append(tokens, l.Token())
		if i < 100 {
			if err := l.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i, tok := range tokens {
		wantEvent(t, ch, lockclient.EventTaken, tok, false)
		if ev := nextEvent(t, ch); ev.Type != lockclient.EventReleased || ev.Holder.Token != tok {
			t.Errorf("cycle %d: %v of token %d, want released %d", i, ev.Type, ev.Holder.Token, tok)
		}
	}
	p := startCutProxy(t, srv.Endpoints()[0])
	far := newClient(t, clientVia(t, srv, p), lockclient.WithTTL(testTTL))
	l := mustAcquire(t, far, "job")
	wantEvent(t, ch, lockclient.EventTaken, l.Token(), false)
	p.Cut()
	wantEvent(t, ch, lockclient.EventExpired, l.Token(), false)
}
