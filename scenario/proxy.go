package scenario

import (
	"net"
	"strings"
	"sync"
	"time"
)

// proxy forwards one worker's etcd connections. Cut closes them all and leaves
// new ones unanswered, as across a partition; Mend forwards again. A delay holds
// every chunk that long before forwarding it, in both directions.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	delay  time.Duration
	conns  map[net.Conn]struct{}
}

func newProxy(host, target string) (*proxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: strings.TrimPrefix(target, "http://"), conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

// url is the endpoint the worker's etcd client dials.
func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) close() {
	p.ln.Close()
	p.setCut(true)
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if !cut {
			go p.forward(c)
		}
	}
}

func (p *proxy) forward(c net.Conn) {
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
	go p.copy(u, c)
	p.copy(c, u)
}

func (p *proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			time.Sleep(d)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setCut cuts (closing every connection) or mends.
func (p *proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}
