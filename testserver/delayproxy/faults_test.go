package delayproxy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// start starts a proxy to a line echo server, closed at the test's end.
func start(t *testing.T, opts ...delayproxy.Option) *delayproxy.Proxy {
	t.Helper()
	p, err := delayproxy.New(echo(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// line is one connection's line reader.
type line struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *delayproxy.Proxy) *line {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &line{c, bufio.NewReader(c)}
}

// echo sends s and returns what comes back, or the error; within, a read deadline
// (0: none).
func (l *line) echo(s string, within time.Duration) (string, error) {
	if _, err := l.c.Write([]byte(s + "\n")); err != nil {
		return "", err
	}
	if within > 0 {
		_ = l.c.SetReadDeadline(time.Now().Add(within))
		defer func() { _ = l.c.SetReadDeadline(time.Time{}) }()
	}
	got, err := l.r.ReadString('\n')
	return string(bytes.TrimSuffix([]byte(got), []byte("\n"))), err
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// TestProxy_Cut: a cut resets the connections through the proxy and leaves new
// ones unanswered; Heal closes those, and a new connection is forwarded again.
func TestProxy_Cut(t *testing.T) {
	p := start(t)
	before := dial(t, p)
	if got, err := before.echo("a", 0); err != nil || got != "a" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	p.Cut()
	if _, err := before.echo("b", 0); err == nil || isTimeout(err) {
		t.Fatalf("an old connection after the cut: %v; want it reset", err)
	}
	during := dial(t, p)
	if _, err := during.echo("c", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a connection made during the cut: %v; want no answer", err)
	}
	p.Heal()
	if _, err := during.echo("d", 0); err == nil || isTimeout(err) {
		t.Fatalf("the held connection after Heal: %v; want it closed", err)
	}
	if got, err := dial(t, p).echo("e", 0); err != nil || got != "e" {
		t.Fatalf("after Heal: %q, %v", got, err)
	}
}

// TestProxy_Pause: while paused nothing is delivered; Resume delivers what was held,
// in order.
func TestProxy_Pause(t *testing.T) {
	p := start(t)
	l := dial(t, p)
	p.Pause()
	if _, err := l.echo("a", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("paused: %v; want no answer", err)
	}
	if _, err := l.c.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	p.Resume()
	for _, want := range []string{"a", "b"} {
		if got, err := l.r.ReadString('\n'); err != nil || got != want+"\n" {
			t.Fatalf("after Resume: %q, %v; want %q", got, err, want)
		}
	}
}

// TestProxy_Close_paused: Close ends a paused proxy, dropping what it held.
func TestProxy_Close_paused(t *testing.T) {
	p, err := delayproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	l := dial(t, p)
	p.Pause()
	if _, err := l.echo("a", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("paused: %v; want no answer", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.r.ReadString('\n'); err == nil {
		t.Fatalf("after Close: read %q; want the connection reset", got)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// TestListenOn: the proxy listens where it is told.
func TestListenOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := start(t, delayproxy.ListenOn(addr))
	if p.Addr() != addr || p.Port() != port {
		t.Fatalf("listening on %s (port %d); want %s", p.Addr(), p.Port(), addr)
	}
	if got, err := dial(t, p).echo("a", 0); err != nil || got != "a" {
		t.Fatalf("%q, %v", got, err)
	}
}

// TestInspect loses the reply to one marked request: held (the client times out,
// the connection stays open) or severed (the client reads EOF). Other requests and
// their replies pass.
func TestInspect(t *testing.T) {
	for _, tt := range []struct {
		name   string
		action delayproxy.Action
		want   func(error) bool
	}{
		{"held", delayproxy.Hold, isTimeout},
		{"severed", delayproxy.Sever, func(err error) bool { return errors.Is(err, io.EOF) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var next atomic.Bool // the next reply is lost
			p := start(t, delayproxy.Inspect(func(up bool, data []byte) delayproxy.Action {
				if up {
					if bytes.Contains(data, []byte("lose")) {
						next.Store(true)
					}
					return delayproxy.Forward
				}
				if next.Swap(false) {
					return tt.action
				}
				return delayproxy.Forward
			}))
			l := dial(t, p)
			if got, err := l.echo("keep", 0); err != nil || got != "keep" {
				t.Fatalf("%q, %v", got, err)
			}
			if got, err := l.echo("lose", 300*time.Millisecond); !tt.want(err) {
				t.Fatalf("the marked request's reply: %q, %v", got, err)
			}
			if got, err := dial(t, p).echo("keep", 0); err != nil || got != "keep" {
				t.Fatalf("a new connection: %q, %v", got, err)
			}
		})
	}
}
