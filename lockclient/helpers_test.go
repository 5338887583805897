package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testTTL is the session TTL of most tests: lockclient.MinTTL, which the test
// members of locktest grant, so that expiry tests are quick.
const testTTL = time.Second

// roomTTL is the session TTL of parallel tests that end sessions themselves
// (revoke, release) and count every loss, and of the holder processes
// (runHolder): twice the shortest, it leaves a busy machine room for a late
// renewal, so that only a test's own freeze or kill ends a process's session.
const roomTTL = 2 * testTTL

func newClient(t testing.TB, cli *clientv3.Client, opts ...lockclient.Option) *lockclient.Client {
	t.Helper()
	c, err := lockclient.New(cli, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustAcquire(t testing.TB, c *lockclient.Client, name string, opts ...lockclient.LockOption) *lockclient.Lock {
	t.Helper()
	l, err := c.Acquire(t.Context(), name, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	return l
}

// waitClosed waits for ch to close; the bound only keeps a broken build from
// hanging the suite, it is no timing assertion.
func waitClosed(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s never closed", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func revision(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "probe-revision")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return resp.Header.Revision
}

// exclusion is the in-memory check that no two holders of a name overlap and
// that each name's successive holders have strictly increasing tokens, and that
// no token is ever granted twice.
type exclusion struct {
	t      testing.TB
	mu     sync.Mutex
	holder map[string]fence.Token
	last   map[string]fence.Token
	seen   map[fence.Token]string
	grants int
}

func newExclusion(t testing.TB) *exclusion {
	return &exclusion{t: t, holder: map[string]fence.Token{}, last: map[string]fence.Token{}, seen: map[fence.Token]string{}}
}

func (e *exclusion) enter(name string, tok fence.Token) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if h, ok := e.holder[name]; ok {
		e.t.Errorf("lock %q granted with token %d while token %d holds it", name, tok, h)
	}
	if tok <= e.last[name] {
		e.t.Errorf("lock %q granted with token %d after token %d", name, tok, e.last[name])
	}
	if other, ok := e.seen[tok]; ok {
		e.t.Errorf("token %d granted twice (%q and %q)", tok, other, name)
	}
	e.holder[name] = tok
	e.last[name] = tok
	e.seen[tok] = name
	e.grants++
}

func (e *exclusion) leave(name string, tok fence.Token) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.holder[name] != tok {
		e.t.Errorf("lock %q left by token %d but held by %d", name, tok, e.holder[name])
	}
	delete(e.holder, name)
}

func (e *exclusion) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.grants
}

// hammer runs n goroutines spread over clients that take and release the given
// names until ctx ends, checking exclusion. acquire errors other than ctx's end
// are passed to onErr, which may replace the client.
func hammer(ctx context.Context, wg *sync.WaitGroup, ex *exclusion, n int, names []string, client func(i int) *lockclient.Client, onErr func(i int, err error)) {
	for i := range n {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				name := names[(i+k)%len(names)]
				l, err := client(i).Acquire(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						onErr(i, err)
					}
					continue
				}
				ex.enter(name, l.Token())
				time.Sleep(time.Duration(k%3) * time.Millisecond)
				ex.leave(name, l.Token())
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if err := l.Release(rctx); err != nil {
					onErr(i, err)
				}
				cancel()
			}
		})
	}
}

// lostAt reports whether err is fence.ErrLost naming l's resource and token.
func lostAt(err error, l *lockclient.Lock) bool {
	return errors.Is(err, fence.ErrLost) && strings.Contains(err.Error(), fmt.Sprintf("%q at token %d", l.Resource(), l.Token()))
}

// lockclient's documented defaults and limits, as the tests rely on them.
const (
	defaultPrefix = "/fencegate/locks/"
	defaultTTL    = 10 * time.Second
	maxValueSize  = 1 << 20
	maxSetSize    = 128
	maxPermits    = 1024
)
