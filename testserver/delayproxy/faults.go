package delayproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Option configures New.
type Option func(*config)

type config struct {
	listen  string
	oneWay  time.Duration
	inspect func(up bool, data []byte) Action
	each    func() func(up bool, data []byte) Action
	hooked  int // Inspect and InspectEach options given
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
	return func(c *config) { c.inspect, c.hooked = f, c.hooked+1 }
}

// InspectEach is Inspect with a hook of each connection's own: newHook is called
// as each connection is accepted, and the hook it returns sees only that
// connection's chunks, both directions (from two goroutines at once), so it can
// keep state across them, such as a protocol's message framing. It cannot be
// combined with Inspect.
func InspectEach(newHook func() func(up bool, data []byte) Action) Option {
	return func(c *config) { c.each, c.hooked = newHook, c.hooked+1 }
}

// hooks returns the maker of each connection's hook.
func (c config) hooks() func() func(up bool, data []byte) Action {
	if c.each != nil {
		return c.each
	}
	return func() func(up bool, data []byte) Action { return c.inspect }
}

func (c config) validate(target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%w: empty target address", ErrInvalidArgument)
	case c.listen == "":
		return fmt.Errorf("%w: empty listen address", ErrInvalidArgument)
	case c.oneWay < 0:
		return fmt.Errorf("%w: negative delay %v", ErrInvalidArgument, c.oneWay)
	case c.hooked > 1:
		return fmt.Errorf("%w: more than one Inspect or InspectEach hook: give one", ErrInvalidArgument)
	case c.hooked == 1 && c.inspect == nil && c.each == nil:
		return fmt.Errorf("%w: nil Inspect or InspectEach hook", ErrInvalidArgument)
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
	Keep                  // as Hold, but kept, the end of the stream too, until Release delivers them in order
)

func verdict(hook func(bool, []byte) Action, up bool, data []byte) Action {
	if hook == nil {
		return Forward
	}
	return hook(up, data)
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
	clear(p.keeps) // never released: their connections are reset
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	clear(p.conns)
}

// Release delivers what every Keep holds, in order, and forwards each kept
// direction again, as bytes that were on their way arrive late. A stream whose
// sender closed while kept reaches its receiver whole, followed by its end (the
// receiver's writing side stays open, so its answer is read, and dropped if the
// sender is gone). Cut and Close drop what Keep holds.
func (p *Proxy) Release() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	ks := p.keeps
	p.keeps = map[*keep]struct{}{}
	p.readers.Add(1) // q stays open until the kept chunks are queued
	p.mu.Unlock()
	defer p.readers.Done()
	for k := range ks {
		k.mu.Lock()
		for _, c := range k.chunks {
			p.q <- c
		}
		k.chunks, k.on = nil, false
		k.mu.Unlock()
	}
}

// keep is one direction of a connection whose bytes Keep holds.
type keep struct {
	mu     sync.Mutex
	on     bool
	chunks []chunk
}

func (p *Proxy) startKeep() *keep {
	k := &keep{on: true}
	p.mu.Lock()
	if !p.closed && !p.cut {
		p.keeps[k] = struct{}{}
	}
	p.mu.Unlock()
	return k
}

// send queues c, or keeps it while k holds its direction.
func (p *Proxy) send(k *keep, c chunk) {
	if k == nil {
		p.q <- c
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.on {
		k.chunks = append(k.chunks, c)
		return
	}
	p.q <- c
}
