package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// TestLock_Done_cutOff cuts a holder off from etcd, 20 times: its Done closes,
// with ErrSessionLost, by its own deadline and so before the next holder
// (which waits for etcd to expire the cut-off session) is granted the lock.
func TestLock_Done_cutOff(t *testing.T) {
	const workers, runs = 4, 5
	srv := shared.Cluster(t)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			name := fmt.Sprintf("cut-%d", w)
			p := startCutProxy(t, srv.Endpoints()[0])
			a := newClient(t, clientVia(t, srv, p), lockclient.WithTTL(testTTL))
			b := newClient(t, srv.Client(t), lockclient.WithTTL(testTTL))
			for run := range runs {
				p.Heal()
				la, err := a.Acquire(t.Context(), name)
				if err != nil {
					t.Errorf("%s run %d: Acquire: %v", name, run, err)
					return
				}
				p.Cut()
				lb, err := b.Acquire(t.Context(), name)
				if err != nil {
					t.Errorf("%s run %d: next holder's Acquire: %v", name, run, err)
					return
				}
				if !isClosed(la.Done()) {
					t.Errorf("%s run %d: the next holder (token %d) was granted before the cut-off holder's Done closed", name, run, lb.Token())
					waitClosed(t, la.Done(), "cut-off holder's Done")
				}
				if cause := context.Cause(la.Context()); !errors.Is(cause, lockclient.ErrSessionLost) {
					t.Errorf("%s run %d: cause %v, want ErrSessionLost", name, run, cause)
				}
				if err := lb.Release(t.Context()); err != nil {
					t.Errorf("%s run %d: release: %v", name, run, err)
				}
			}
		})
	}
	wg.Wait()
}

// TestClient_unreachable: with etcd unreachable and a context without a
// deadline, every call but the waits gives up with an error matching
// context.DeadlineExceeded instead of waiting for ever.
func TestClient_unreachable(t *testing.T) {
	srv := shared.Cluster(t)
	p := startCutProxy(t, srv.Endpoints()[0])
	cli := clientVia(t, srv, p)
	c := newClient(t, cli, lockclient.WithTTL(testTTL))
	l := mustAcquire(t, c, "held")
	p.Cut()
	// At once, while the lock may still be held (it ends at its deadline): an
	// error from the cut, the bound, or the loss.
	if err := l.Renew(context.Background()); err == nil {
		t.Error("Renew: nil error with etcd cut off")
	}
	calls := map[string]func(ctx context.Context) error{
		"TryAcquire": func(ctx context.Context) error { _, err := c.TryAcquire(ctx, "job"); return err },
		"TryAcquireSet": func(ctx context.Context) error {
			_, err := c.TryAcquireSet(ctx, []string{"x", "y"})
			return err
		},
		"Holder":    func(ctx context.Context) error { _, err := c.Holder(ctx, "job"); return err },
		"List":      func(ctx context.Context) error { _, err := c.List(ctx); return err },
		"NextToken": func(ctx context.Context) error { _, err := c.NextToken(ctx); return err },
		"Release":   func(ctx context.Context) error { return c.Release(ctx, "job", 5) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			errc := make(chan error, 1)
			go func() { errc <- call(context.Background()) }()
			select {
			case err := <-errc:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s: %v, want an error matching context.DeadlineExceeded", name, err)
				}
			case <-time.After(2 * time.Minute): // keeps a broken build from hanging the suite
				t.Fatalf("%s did not return", name)
			}
		})
	}
}

// startCutProxy starts a proxy to the etcd member at endpoint (a URL), closed at
// the test's end: Cut partitions a client that dials it from the member, Heal mends.
func startCutProxy(t testing.TB, endpoint string) *delayproxy.Proxy {
	t.Helper()
	p, err := delayproxy.Start(strings.TrimPrefix(endpoint, "http://"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
