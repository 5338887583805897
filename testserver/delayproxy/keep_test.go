package delayproxy_test

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// recorder is a target that echoes each connection's bytes and, when the client's
// end of the stream arrives, sends everything it received on got.
func recorder(t *testing.T) (addr string, got chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got = make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var all bytes.Buffer
				_, _ = io.Copy(io.MultiWriter(c, &all), c)
				got <- all.String()
			}()
		}
	}()
	return ln.Addr().String(), got
}

// keepSecond keeps each connection's second chunk from the client, and what follows.
func keepSecond() func(up bool, data []byte) delayproxy.Action {
	n := 0 // the client's chunks: one goroutine only sees up chunks
	return func(up bool, data []byte) delayproxy.Action {
		if !up {
			return delayproxy.Forward
		}
		if n++; n == 2 {
			return delayproxy.Keep
		}
		return delayproxy.Forward
	}
}

// TestProxy_Keep_afterClose: what Keep holds reaches the target only at Release,
// whole and in order, even though the client closed meanwhile; the end of the
// stream comes after it.
func TestProxy_Keep_afterClose(t *testing.T) {
	target, got := recorder(t)
	p, err := delayproxy.New(target, delayproxy.InspectEach(keepSecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	l := dial(t, p)
	if got, err := l.echo("first", 0); err != nil || got != "first" {
		t.Fatalf("before Keep: %q, %v", got, err)
	}
	if got, err := l.echo("kept", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("kept: %q, %v; want no answer", got, err)
	}
	if _, err := l.c.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	_ = l.c.Close()
	p.Release()
	if all := <-got; all != "first\nkept\nafter\n" {
		t.Fatalf("the target received %q; want every line, in order", all)
	}
}

// TestProxy_Keep_release: a connection still open gets its answer at Release and
// is forwarded from then on; each connection's hook keeps its own count.
func TestProxy_Keep_release(t *testing.T) {
	target, _ := recorder(t)
	p, err := delayproxy.New(target, delayproxy.InspectEach(keepSecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	a, b := dial(t, p), dial(t, p)
	for _, l := range []*line{a, b} {
		if got, err := l.echo("first", 0); err != nil || got != "first" {
			t.Fatalf("before Keep: %q, %v", got, err)
		}
		if got, err := l.echo("kept", 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("kept: %q, %v; want no answer", got, err)
		}
	}
	p.Release()
	for _, l := range []*line{a, b} {
		if got, err := l.r.ReadString('\n'); err != nil || got != "kept\n" {
			t.Fatalf("after Release: %q, %v", got, err)
		}
		if got, err := l.echo("third", 0); err != nil || got != "third" {
			t.Fatalf("after Release, a new line: %q, %v", got, err)
		}
	}
}
