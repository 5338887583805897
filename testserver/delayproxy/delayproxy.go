// Package delayproxy is a TCP proxy for tests: it delays every chunk of bytes by a
// fixed one-way delay in each direction, for benchmarks that must show what round
// trips cost across a network (loopback hides them), and it breaks the network on
// demand: Cut and Heal for a partition, Pause and Resume for a link that stalls, an
// Inspect hook that loses a chosen reply, and Keep and Release for bytes that are
// on their way but arrive late. It does not limit throughput: each
// chunk read is queued with its arrival time and written, in order, once the delay
// has passed, so many chunks can be in flight at once.
//
// The delay is kept to tens of microseconds: one goroutine locked to its own OS
// thread delivers every chunk of a Proxy, sleeping with nanosleep. A timer of the Go
// runtime would not do: a runtime idle in the network poller wakes for timers at
// millisecond granularity, which turned 250 µs each way into about 2.3 ms per round
// trip (BenchmarkRoundTrip measures it).
package delayproxy

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The package's errors.
var (
	// ErrInvalidArgument is wrapped by New and Start for bad input: an empty target
	// or listen address, a negative delay, a nil hook.
	ErrInvalidArgument = errors.New("delayproxy: invalid argument")
)

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	ln     net.Listener
	target string
	hooks  func() func(up bool, data []byte) Action // each connection's Inspect hook
	delay  atomic.Int64                             // one-way, in nanoseconds
	q      chan chunk                               // every direction's chunks, in arrival order

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	cut     bool               // new connections are held, unanswered
	paused  chan struct{}      // non-nil while paused; closed by Resume
	keeps   map[*keep]struct{} // the directions holding bytes for Release
	closed  bool
	readers sync.WaitGroup // accept and the readers: they send on q
	done    chan struct{}  // closed when the delivering goroutine ends
}

// chunk is data read from src, to be written to dst when due; a chunk with eof set
// closes both once everything before it is written, or with half set only dst's
// writing side (the end of a kept stream: dst's answer still comes back).
type chunk struct {
	due      time.Time
	dst, src net.Conn
	data     []byte
	eof      bool
	half     bool
}

// Start listens on 127.0.0.1 (a free port) and forwards every connection to target,
// delaying each direction by oneWay. A round trip through it costs 2 x oneWay more
// than a direct one. It is New(target, OneWay(oneWay)).
func Start(target string, oneWay time.Duration) (*Proxy, error) {
	return New(target, OneWay(oneWay))
}

// New listens (on a free port of 127.0.0.1 unless ListenOn says otherwise) and
// forwards every connection to target, host:port. Bad input returns an error
// wrapping ErrInvalidArgument before anything listens; a failed listen returns the
// listener's error.
func New(target string, opts ...Option) (*Proxy, error) {
	cfg := config{listen: "127.0.0.1:0"}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("delayproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, hooks: cfg.hooks(), q: make(chan chunk, 1<<16),
		conns: map[net.Conn]struct{}{}, keeps: map[*keep]struct{}{}, done: make(chan struct{})}
	p.delay.Store(int64(cfg.oneWay))
	go p.deliver()
	p.readers.Go(p.accept)
	return p, nil
}

// SetDelay changes the one-way delay of every chunk read from now on (chunks
// already queued keep theirs); a negative delay counts as 0. Delivery stays in
// arrival order, so after a cut the chunks read since wait for the ones before
// them, as on one TCP connection. Tests use it to slow a server down as an
// overload would, and to let it recover.
func (p *Proxy) SetDelay(oneWay time.Duration) { p.delay.Store(int64(max(oneWay, 0))) }

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops accepting, resets every proxied connection (what is queued or held is
// dropped, not delivered) and waits for the proxy's goroutines to end. A second
// Close does nothing and returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.dropLocked()
	p.resumeLocked() // the readers blocked on a full queue must drain
	p.mu.Unlock()
	err := p.ln.Close()
	p.readers.Wait()
	close(p.q)
	<-p.done
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

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.hold(in) {
			continue
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
		hook := p.hooks()
		p.readers.Go(func() { p.read(out, in, true, hook) })
		p.readers.Go(func() { p.read(in, out, false, hook) })
	}
}

// read queues what src sends, for dst, each chunk stamped with its due time; up
// tells the hook the direction (client to target).
func (p *Proxy) read(dst, src net.Conn, up bool, hook func(bool, []byte) Action) {
	buf := make([]byte, 32<<10)
	held := false
	var k *keep
	for {
		n, err := src.Read(buf)
		if n > 0 && !held && k == nil {
			switch verdict(hook, up, buf[:n]) {
			case Hold:
				held = true
				continue
			case Keep:
				k = p.startKeep()
			case Sever:
				_ = src.Close()
				_ = dst.Close()
				p.untrack(src, dst)
				return
			}
		}
		due := time.Now().Add(time.Duration(p.delay.Load()))
		if n > 0 && !held {
			// Copied out at its own size: most reads are a few hundred bytes.
			p.send(k, chunk{due: due, dst: dst, src: src, data: append([]byte(nil), buf[:n]...)})
		}
		if err != nil {
			p.send(k, chunk{due: due, dst: dst, src: src, eof: true, half: k != nil})
			return
		}
	}
}

// deliver writes every chunk when it is due, in arrival order (with one delay for
// all, arrival order is due order), on an OS thread of its own; while the proxy is
// paused it waits.
func (p *Proxy) deliver() {
	runtime.LockOSThread()
	fineTimerSlack()
	defer close(p.done)
	broken := map[net.Conn]bool{}
	for c := range p.q {
		waitUntil(c.due)
		p.waitResumed()
		if c.eof && c.half {
			if tc, ok := c.dst.(*net.TCPConn); ok && !broken[c.dst] && tc.CloseWrite() == nil {
				continue
			}
		}
		if c.eof {
			_ = c.dst.Close()
			_ = c.src.Close()
			p.untrack(c.dst, c.src)
			delete(broken, c.dst)
			continue
		}
		if broken[c.dst] {
			continue
		}
		if _, err := c.dst.Write(c.data); err != nil {
			broken[c.dst] = true
			_ = c.src.Close()
		}
	}
}
