package scenario

import (
	"net"
	"strings"
	"time"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// proxy forwards one worker's etcd or store connections (testserver/delayproxy).
// A cut resets them all and leaves new ones unanswered, as across a partition;
// mending forwards again. A delay holds every chunk that long before forwarding
// it, in both directions. Release delivers what a hook kept (OnTheWire).
type proxy struct{ p *delayproxy.Proxy }

func newProxy(host, target string, opts ...delayproxy.Option) (*proxy, error) {
	opts = append(opts, delayproxy.ListenOn(net.JoinHostPort(host, "0")))
	p, err := delayproxy.New(strings.TrimPrefix(target, "http://"), opts...)
	if err != nil {
		return nil, err
	}
	return &proxy{p}, nil
}

// url is the endpoint the worker's etcd client dials.
func (p *proxy) url() string { return "http://" + p.p.Addr() }

func (p *proxy) close() { _ = p.p.Close() }

// setCut cuts (resetting every connection) or mends.
func (p *proxy) setCut(cut bool) {
	if cut {
		p.p.Cut()
	} else {
		p.p.Heal()
	}
}

func (p *proxy) setDelay(d time.Duration) { p.p.SetDelay(d) }

func (p *proxy) release() { p.p.Release() }
