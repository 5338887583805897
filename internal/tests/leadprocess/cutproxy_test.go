package leadprocess_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// cutProxy forwards TCP connections to an etcd member until Cut: then every
// connection through it is closed and new ones are accepted but never answered,
// as across a network partition; Mend forwards again.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

func startCutProxy(t testing.TB, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.Cut() })
	go p.accept()
	return p
}

// URL is the endpoint to give an etcd client.
func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if cut {
			continue // held open, never answered: closed by the next Cut or Mend
		}
		go p.forward(c)
	}
}

func (p *cutProxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		u.Close()
		return
	}
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	go func() { io.Copy(u, c); u.Close(); c.Close() }()
	io.Copy(c, u)
	c.Close()
	u.Close()
}

// Cut closes every connection and answers no new one.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.closeAllLocked()
}

// Mend forwards new connections again (the unanswered ones are closed, so
// their clients dial again).
func (p *cutProxy) Mend() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.closeAllLocked()
}

func (p *cutProxy) closeAllLocked() {
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}
