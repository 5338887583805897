package delayproxy

import (
	"fmt"
	"net"
	"time"
)

// Option configures New.
type Option func(*config)

type config struct {
	listen  string
	oneWay  time.Duration
	inspect func(up bool, data []byte) Action
}

// ListenOn makes the proxy listen on addr, host:port (port 0 for a free one), not
// on a free port of 127.0.0.1: a port a test must take itself, or a host a
// container can reach.
func ListenOn(addr string) Option { return func(c *config) { c.listen = addr } }

// OneWay delays each direction by d (0 by default); SetDelay changes it later.
func OneWay(d time.Duration) Option { return func(c *config) { c.oneWay = d } }

// Inspect calls f with every chunk read, before it is queued: up is true for bytes
// from a client to the target. Its Action decides the chunk's fate, to lose the
// reply to one chosen request. f runs on the connections' reading goroutines, two
// per connection, at once: it must be safe for concurrent use.
func Inspect(f func(up bool, data []byte) Action) Option {
	return func(c *config) { c.inspect = f }
}

func (c config) validate(target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%w: empty target address", ErrInvalidArgument)
	case c.listen == "":
		return fmt.Errorf("%w: empty listen address", ErrInvalidArgument)
	case c.oneWay < 0:
		return fmt.Errorf("%w: negative delay %v", ErrInvalidArgument, c.oneWay)
	}
	if _, _, err := net.SplitHostPort(c.listen); err != nil {
		return fmt.Errorf("%w: listen address %q: %v", ErrInvalidArgument, c.listen, err)
	}
	return nil
}

// Action is what an Inspect hook does with a chunk.
type Action int

// The actions of an Inspect hook.
const (
	Forward Action = iota // deliver it, after the delay
	Hold                  // deliver neither it nor anything after it in that direction; the connection stays open
	Sever                 // close the connection, both sides (the client reads EOF): neither this chunk nor the rest is delivered
)

func (p *Proxy) verdict(up bool, data []byte) Action {
	if p.inspect == nil {
		return Forward
	}
	return p.inspect(up, data)
}

// Cut partitions the proxy: every connection through it is reset and new ones are
// accepted but never answered (nor forwarded), until Heal. A client sees what it
// would across a lost network: its calls fail or time out, and it cannot reconnect.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.dropLocked()
}

// Heal ends a Cut: the connections held unanswered are closed, so their clients
// dial again, and new ones are forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.dropLocked()
}

// Pause stops delivery: bytes still are read and queued, in both directions, but
// none is written until Resume (a link that stalls: a peer sees nothing, not an
// error). Cut or Close while paused drops what is queued.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused == nil && !p.closed {
		p.paused = make(chan struct{})
	}
}

// Resume delivers what Pause held, in order, each chunk at once if already due.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *Proxy) resumeLocked() {
	if p.paused != nil {
		close(p.paused)
		p.paused = nil
	}
}

func (p *Proxy) waitResumed() {
	p.mu.Lock()
	ch := p.paused
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// hold keeps c open and unanswered while the proxy is cut, reporting whether it
// did.
func (p *Proxy) hold(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut && !p.closed {
		return false
	}
	if p.closed {
		_ = c.Close()
	} else {
		p.conns[c] = struct{}{}
	}
	return true
}

// dropLocked resets every connection: nothing queued for it or in its socket's
// send buffer is delivered, as when a network drops what it carries.
func (p *Proxy) dropLocked() {
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	clear(p.conns)
}
