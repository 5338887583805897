package redisfence_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// cutter is a proxy in front of a real server that, once armed, loses the reply to
// the next script call (EVALSHA) after the call has reached the server: it closes
// the client's connection when the reply arrives (cut), or holds the reply back
// (hold).
type cutter struct {
	*delayproxy.Proxy
	mode    atomic.Value // armed: "", "cut" or "hold"
	pending atomic.Value // what to do with the next reply
}

func startCutter(t *testing.T, target string) *cutter {
	t.Helper()
	c := &cutter{}
	c.mode.Store("")
	c.pending.Store("")
	p, err := delayproxy.New(target, delayproxy.Inspect(c.inspect))
	if err != nil {
		t.Fatal(err)
	}
	c.Proxy = p
	t.Cleanup(func() { _ = p.Close() })
	return c
}

func (c *cutter) inspect(up bool, data []byte) delayproxy.Action {
	if up {
		if bytes.Contains(data, []byte("evalsha")) {
			c.pending.Store(c.mode.Swap(""))
		}
		return delayproxy.Forward
	}
	switch c.pending.Swap("") {
	case "cut":
		return delayproxy.Sever
	case "hold":
		return delayproxy.Hold // never relayed; ends when the connection does
	}
	return delayproxy.Forward
}

// TestStore_commitUnknown checks that a write whose script reached the server but
// whose reply was lost (the connection closed, or ctx ended waiting) returns
// fence.ErrCommitUnknown wrapping the cause (EOF, a read timeout), is not sent again (go-redis would
// resend it on a broken connection: an INCR in it would count twice), and did
// land.
func TestStore_commitUnknown(t *testing.T) {
	raw := node.Client(t)
	opts := node.Options(t)
	proxy := startCutter(t, opts.Addr)
	// go-redis resends a command whose connection broke, up to MaxRetries; the read
	// timeout is what a held reply runs into.
	opts.Addr, opts.PoolSize, opts.MaxRetries, opts.ReadTimeout = proxy.Addr(), 1, 3, 300*time.Millisecond
	e := envOn(t, raw, redis.NewClient(opts))
	ctx := t.Context()
	res := e.res("r")
	n := e.key(res, "n")
	incr := func(ctx context.Context, tok fence.Token) error {
		return e.store.Fenced(ctx, fence.NewGrant(res, tok), func(tx redis.Pipeliner) error {
			tx.Incr(ctx, n)
			return nil
		})
	}
	// Load both scripts: the next calls are one EVALSHA each.
	if err := incr(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Set(ctx, fence.NewGrant(res, 1), e.key(res, "s"), "v", 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		mode  string
		write func(ctx context.Context, tok fence.Token) error
		count bool
	}{
		{"cut", incr, true},
		{"hold", incr, true},
		{"cut", func(ctx context.Context, tok fence.Token) error {
			return e.store.Set(ctx, fence.NewGrant(res, tok), e.key(res, "s"), "v", 0)
		}, false},
	}
	want := int64(1)
	for i, tt := range tests {
		tok := fence.Token(i + 2)
		proxy.mode.Store(tt.mode)
		err := tt.write(ctx, tok)
		var timeout net.Error
		cause := errors.Is(err, io.EOF)
		if tt.mode == "hold" {
			cause = errors.As(err, &timeout) && timeout.Timeout()
		}
		if !errors.Is(err, fence.ErrCommitUnknown) || !cause {
			t.Fatalf("%s: write = %v, want ErrCommitUnknown with its cause", tt.mode, err)
		}
		if tt.count {
			want++
			if got, _ := raw.Get(ctx, n).Int64(); got != want {
				t.Fatalf("%s: counter %d, want %d: the transaction ran %d times", tt.mode, got, want, got-want+1)
			}
		}
		if e.mark(t, res) != tok {
			t.Fatalf("%s: mark %d, want %d: the write landed", tt.mode, e.mark(t, res), tok)
		}
	}
	if err := incr(ctx, 9); err != nil {
		t.Fatalf("after lost replies the Store works again: %v", err)
	}
}
