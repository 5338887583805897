package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// proxy stands between a Client and etcd: it forwards, or turns into an etcd
// that accepts TCP and never answers (blackhole: it reads and drops every
// byte), or into a closed port (refuse: its listener and connections closed).
type proxy struct {
	t      testing.TB
	target string // etcd's host:port
	ln     net.Listener
	addr   string
	wg     sync.WaitGroup

	mu    sync.Mutex
	mode  proxyMode
	conns []net.Conn
}

type proxyMode int

const (
	forward proxyMode = iota
	blackhole
	refuse
)

func (m proxyMode) String() string {
	return [...]string{"reachable", "never answers", "closed port"}[m]
}

// newProxy starts a proxy to target (host:port; "" for none) in mode m. The
// test's cleanup stops it.
func newProxy(t testing.TB, target string, m proxyMode) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: target, ln: ln, addr: ln.Addr().String()}
	p.wg.Go(p.accept)
	p.set(m)
	t.Cleanup(p.stop)
	return p
}

// cut switches the proxy from forwarding to mode m, and waits until cli's
// connection is down for a closed port, so that a call sent next waits for it.
func (p *proxy) cut(m proxyMode, cli *clientv3.Client) {
	p.set(m)
	if m != refuse {
		return
	}
	conn := cli.ActiveConnection()
	for st := conn.GetState(); st == connectivity.Ready; st = conn.GetState() {
		conn.WaitForStateChange(context.Background(), st)
	}
}

func (p *proxy) endpoint() string { return "http://" + p.addr }

func (p *proxy) accept() {
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		if mode == refuse {
			p.mu.Unlock()
			conn.Close()
			continue
		}
		p.conns = append(p.conns, conn)
		p.mu.Unlock()
		var up net.Conn
		if mode == forward {
			if up, err = net.Dial("tcp", p.target); err != nil {
				conn.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, up)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(conn, up) })
			p.wg.Go(func() { p.pipe(up, conn) })
			continue
		}
		p.wg.Go(func() { p.pipe(conn, nil) })
	}
}

// pipe copies from src to dst while the proxy forwards, and drops what it
// reads otherwise.
func (p *proxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		fwd := p.mode == forward && dst != nil
		p.mu.Unlock()
		if fwd {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// set switches the proxy to mode m; refuse closes its port for good.
func (p *proxy) set(m proxyMode) {
	p.mu.Lock()
	p.mode = m
	var conns []net.Conn
	if m == refuse {
		conns, p.conns = p.conns, nil
	}
	p.mu.Unlock()
	if m == refuse {
		p.ln.Close()
		for _, c := range conns {
			c.Close()
		}
	}
}

func (p *proxy) stop() {
	p.set(refuse)
	p.wg.Wait()
}

// inFlight runs f: the name it has in a stack dump marks a call in flight.
//
//go:noinline
func inFlight(f func() error) error { return f() }

// waitInFlight waits until a goroutine running marker (a function name in a
// stack dump) waits inside etcd's client, gRPC or a wait of the Client; it
// fails the test if the call ends first (res gets its error).
func waitInFlight(t testing.TB, marker string, res chan error) {
	t.Helper()
	for {
		select {
		case err := <-res:
			res <- err
			t.Fatalf("the call ended before Close: %v", err)
		default:
		}
		for _, g := range goroutines() {
			if !strings.Contains(g, marker) {
				continue
			}
			for _, at := range []string{"go.etcd.io/etcd/client/v3", "google.golang.org/grpc", "lockclient.(*Client).wait(", "lockclient.(*Client).sleep(", "lockclient.(*Client).session("} {
				if strings.Contains(g, at) {
					return
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// clientGoroutines returns the stacks of the goroutines that run code of
// package lockclient or its internal packages.
func clientGoroutines() []string {
	var gs []string
	for _, g := range goroutines() {
		if strings.Contains(g, "fencegate/lockclient.") || strings.Contains(g, "fencegate/lockclient/internal/") {
			gs = append(gs, g)
		}
	}
	return gs
}

// noClientGoroutines waits until no goroutine runs code of package
// lockclient: those the Clients started all ended. A leak hangs here, until
// go test's timeout dumps every stack.
func noClientGoroutines(t testing.TB) {
	t.Helper()
	for len(clientGoroutines()) > 0 {
		time.Sleep(time.Millisecond)
	}
}

// goroutinesBack waits until runtime.NumGoroutine is back to base at most.
func goroutinesBack(t testing.TB, base int) {
	t.Helper()
	for runtime.NumGoroutine() > base {
		time.Sleep(time.Millisecond)
	}
}

// closeCall is one call of a Client that Close must end.
type closeCall struct {
	name string
	// lock: the call needs a lock (held through a reachable etcd first);
	// waits: the call waits on a lock another Client holds.
	lock, waits bool
	// run makes the call on name (held by another Client when the call
	// waits); l is the lock it needs; began, called once the call holds what it
	// needs (Lead's term), lets a call of lock whose etcd is cut off then.
	run func(ctx context.Context, c *lockclient.Client, name string, l *lockclient.Lock, began func()) error
}

var closeCalls = []closeCall{
	{name: "Acquire", waits: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.Acquire(ctx, name)
		return err
	}},
	{name: "TryAcquire", run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.TryAcquire(ctx, name)
		return err
	}},
	{name: "AcquireSet", waits: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.AcquireSet(ctx, []string{name + "-other", name})
		return err
	}},
	{name: "TryAcquireSet", run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.TryAcquireSet(ctx, []string{name + "-other", name})
		return err
	}},
	{name: "AcquirePermit", waits: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.AcquirePermit(ctx, "sem-"+name, 1)
		return err
	}},
	{name: "TryAcquirePermit", run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.TryAcquirePermit(ctx, "sem-"+name, 1)
		return err
	}},
	{name: "Lead", waits: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		return c.Lead(ctx, name, func(*lockclient.Lock) error { return errors.New("led: never meant to") })
	}},
	{name: "Lead term", lock: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, began func()) error {
		var cause error
		err := c.Lead(ctx, name, func(term *lockclient.Lock) error {
			began()
			<-term.Done()
			cause = context.Cause(term.Context())
			return nil
		})
		if err != nil && !errors.Is(cause, lockclient.ErrClosed) {
			return fmt.Errorf("Lead returned %w, but the term's cause is %v", err, cause)
		}
		return err
	}},
	{name: "Watch", waits: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		return drain(c.Watch(ctx, name))
	}},
	{name: "WatchPrefix", waits: true, run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		return drain(c.WatchPrefix(ctx, ""))
	}},
	{name: "Holder", run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		_, err := c.Holder(ctx, name)
		return err
	}},
	{name: "List", run: func(ctx context.Context, c *lockclient.Client, _ string, _ *lockclient.Lock, _ func()) error {
		_, err := c.List(ctx)
		return err
	}},
	{name: "NextToken", run: func(ctx context.Context, c *lockclient.Client, _ string, _ *lockclient.Lock, _ func()) error {
		_, err := c.NextToken(ctx)
		return err
	}},
	{name: "Client.Release", run: func(ctx context.Context, c *lockclient.Client, name string, _ *lockclient.Lock, _ func()) error {
		return c.Release(ctx, name, 1)
	}},
	{name: "Lock.Renew", lock: true, run: func(ctx context.Context, _ *lockclient.Client, _ string, l *lockclient.Lock, _ func()) error {
		return l.Renew(ctx)
	}},
	{name: "Lock.Release", lock: true, run: func(ctx context.Context, _ *lockclient.Client, _ string, l *lockclient.Lock, _ func()) error {
		return l.Release(ctx)
	}},
}

// drain reads a watch until its channel closes; a closed channel is the
// watch's ErrClosed.
func drain(ch <-chan lockclient.Event, err error) error {
	if err != nil {
		return err
	}
	for range ch {
	}
	return lockclient.ErrClosed
}

// TestClient_Close_endsCallsInFlight: every call in flight ends with ErrClosed
// once Close is called, whether etcd never answers, its port is closed, or
// the call waits on a lock another Client holds; afterwards no goroutine of
// the Client is left, and the count of goroutines is back where it started.
func TestClient_Close_endsCallsInFlight(t *testing.T) {
	srv := locktest.Start(t)
	u, err := url.Parse(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mode := range []proxyMode{blackhole, refuse, forward} {
		for _, call := range closeCalls {
			if mode == forward && !call.waits && !call.lock {
				continue // returns at once: nothing for Close to end
			}
			if mode == forward && call.lock && call.name != "Lead term" {
				continue // Renew and Release return at once
			}
			n++
			prefix := fmt.Sprintf("/close-%d/", n)
			t.Run(mode.String()+"/"+call.name, func(t *testing.T) {
				closeInFlight(t, call, mode, u.Host, prefix)
			})
		}
	}
}

func closeInFlight(t *testing.T, call closeCall, mode proxyMode, target, prefix string) {
	const name = "job"
	// Close waits up to the TTL for an etcd that never answers; 2 s leaves the
	// call in flight ample time to be there when Close comes.
	opts := []lockclient.Option{lockclient.WithTTL(2 * time.Second), lockclient.WithPrefix(prefix)}
	base := runtime.NumGoroutine()
	start := mode
	if call.lock {
		start = forward // the lock is taken first, then etcd is cut off
	}
	p := newProxy(t, target, start)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.endpoint()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := lockclient.New(cli, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var holder *lockclient.Client
	var holderCli *clientv3.Client
	if call.waits && mode == forward {
		holderCli, err = clientv3.New(clientv3.Config{Endpoints: []string{"http://" + target}, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer holderCli.Close()
		holder, err = lockclient.New(holderCli, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.AcquireSet(t.Context(), []string{name, name + "-other"}); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.AcquirePermit(t.Context(), "sem-"+name, 1); err != nil {
			t.Fatal(err)
		}
	}
	var l *lockclient.Lock
	if call.lock && call.name != "Lead term" {
		l = mustAcquire(t, c, name)
		p.cut(mode, cli)
	}

	began := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- inFlight(func() error {
			return call.run(t.Context(), c, name, l, sync.OnceFunc(func() { close(began) }))
		})
	}()
	switch {
	case call.name == "Lead term":
		<-began
		p.cut(mode, cli)
	case strings.HasPrefix(call.name, "Watch"):
		waitInFlight(t, "lockclient.(*watcher).run", res)
	default:
		waitInFlight(t, "lockclient_test.inFlight", res)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if err := <-res; !errors.Is(err, lockclient.ErrClosed) {
		t.Errorf("%s after Close: %v, want ErrClosed", call.name, err)
	}
	<-closed // bounded by the TTL: it may try to reach etcd
	if holder != nil {
		holder.Close()
	}
	noClientGoroutines(t)
	cli.Close()
	if holderCli != nil {
		holderCli.Close()
	}
	p.stop()
	goroutinesBack(t, base)
}

// TestClient_Watch_ctxEnds: when a Watch's ctx ends its channel closes and
// its goroutines end, while the Client lives on (it holds no session here,
// so none of its goroutines is left).
func TestClient_Watch_ctxEnds(t *testing.T) {
	srv := shared.Cluster(t)
	c := newClient(t, srv.Client(t))
	for _, prefix := range []bool{false, true} {
		ctx, cancel := context.WithCancel(t.Context())
		watch := c.Watch
		if prefix {
			watch = c.WatchPrefix
		}
		ch, err := watch(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if !prefix {
			<-ch // the initial state (a prefix reports only held names: none)
		}
		cancel()
		for range ch {
		}
		noClientGoroutines(t)
	}
}
