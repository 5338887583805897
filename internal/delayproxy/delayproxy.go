// Package delayproxy is a TCP proxy on loopback that delays every chunk of bytes by a
// fixed one-way delay in each direction, for benchmarks that must show what round
// trips cost across a network (loopback hides them). It does not limit throughput:
// each chunk read is queued with its arrival time and written, in order, once the
// delay has passed, so many chunks can be in flight at once.
package delayproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) and forwards every connection to target,
// delaying each direction by oneWay. A round trip through it costs 2 x oneWay more
// than a direct one.
func Start(target string, oneWay time.Duration) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("delayproxy: empty target address")
	}
	if oneWay < 0 {
		return nil, fmt.Errorf("delayproxy: negative delay %v", oneWay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delayproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, delay: oneWay, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting, closes every proxied connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in) || !p.track(out) {
			_ = in.Close()
			_ = out.Close()
			return
		}
		for _, c := range []net.Conn{in, out} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
		}
		p.wg.Go(func() { p.pipe(out, in) })
		p.wg.Go(func() { p.pipe(in, out) })
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each chunk held until its arrival time plus the delay.
// A reader goroutine queues chunks; this goroutine writes them when due.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	q := make(chan chunk, 4096)
	p.wg.Go(func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(p.delay), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.data); err != nil {
			_ = src.Close()
			for range q { // let the reader end
			}
			return
		}
	}
}
