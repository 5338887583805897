package delayproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string { return echoB(t) }

func echoB(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func TestProxy_roundTripDelayed(t *testing.T) {
	const oneWay = 20 * time.Millisecond
	p, err := delayproxy.Start(echo(t), oneWay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i := range 3 {
		start := time.Now()
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != "ping\n" {
			t.Fatalf("round %d: got %q", i, line)
		}
		// A lower bound only: the delay is a floor, never a limit on a slow machine.
		if rtt := time.Since(start); rtt < 2*oneWay {
			t.Fatalf("round %d: round trip %v, want at least %v", i, rtt, 2*oneWay)
		}
	}
}

func TestNew_badInput(t *testing.T) {
	tests := []struct {
		name   string
		target string
		opts   []delayproxy.Option
	}{
		{"empty target", "", nil},
		{"negative delay", "127.0.0.1:1", []delayproxy.Option{delayproxy.OneWay(-time.Millisecond)}},
		{"empty listen address", "127.0.0.1:1", []delayproxy.Option{delayproxy.ListenOn("")}},
		{"listen address without a port", "127.0.0.1:1", []delayproxy.Option{delayproxy.ListenOn("127.0.0.1")}},
		{"nil per-connection hook", "127.0.0.1:1", []delayproxy.Option{delayproxy.InspectEach(nil)}},
		{"two hooks", "127.0.0.1:1", []delayproxy.Option{
			delayproxy.Inspect(func(bool, []byte) delayproxy.Action { return delayproxy.Forward }),
			delayproxy.InspectEach(func() func(bool, []byte) delayproxy.Action { return nil }),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := delayproxy.New(tt.target, tt.opts...); !errors.Is(err, delayproxy.ErrInvalidArgument) {
				if p != nil {
					_ = p.Close()
				}
				t.Fatalf("New = %v; want ErrInvalidArgument", err)
			}
		})
	}
	if _, err := delayproxy.Start("127.0.0.1:1", -time.Millisecond); !errors.Is(err, delayproxy.ErrInvalidArgument) {
		t.Fatalf("Start with a negative delay = %v; want ErrInvalidArgument", err)
	}
}

// TestProxy_SetDelay raises the delay, then drops it: a round trip after the
// raise takes at least the new delay twice, and the bytes stay in order.
func TestProxy_SetDelay(t *testing.T) {
	p, err := delayproxy.Start(echo(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i, oneWay := range []time.Duration{50 * time.Millisecond, 0, 30 * time.Millisecond} {
		p.SetDelay(oneWay)
		start := time.Now()
		want := string(rune('a'+i)) + "\n"
		if _, err := c.Write([]byte(want)); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != want {
			t.Fatalf("round %d: got %q, want %q", i, line, want)
		}
		if took := time.Since(start); took < 2*oneWay {
			t.Fatalf("round %d: round trip took %v, under twice the one-way delay %v", i, took, oneWay)
		}
	}
}
