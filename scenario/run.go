package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// prefix is the etcd key prefix of the workers' locks.
const prefix = "/fencegate/scenario/"

// run is one scenario in the test process.
type run struct {
	t         *testing.T
	cfg       Config
	cluster   *locktest.Cluster // nil for Config.EtcdEndpoints
	etcd      *clientv3.Client
	endpoints []string
	down      map[int]bool // etcd members crashed and not yet restarted
	storeDown bool
	ln        net.Listener
	wired     bool // a step waits for OnTheWire: the store proxies read the workers' statements
	data      string
	start     time.Time
	undo      sync.WaitGroup
	closed    chan struct{}
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change
	seq       int
	procs     map[string]*proc
	pending   []*Step                 // the steps not yet done
	claims    map[*Step]chan struct{} // a held reach per step whose When it met
	hist      History
}

// etcdProxies calls f on each of p's proxies to etcd.
func (p *proc) etcdProxies(f func(*proxy)) {
	for _, pr := range p.etcd {
		f(pr)
	}
}

// proc is one worker process.
type proc struct {
	name    string
	h       Handle
	etcd    []*proxy // one per etcd member
	store   *proxy   // to Config.StoreServer, or nil
	routed  bool     // the worker asked for Worker.StoreDSN
	cut     bool     // a CutOffStore acted on it
	out     syncBuffer
	reached map[string]int
	held    map[string]int // locks granted: resource -> token
	started bool
	exited  bool
	hello   bool
	waited  bool
	served  chan struct{} // closed when the control connection is drained
	write   *WriteRecord  // the write in progress
	wire    *wire         // holds a statement in flight on store (when the run is wired)
	wireErr string        // why the OnTheWire step waiting for it cannot be met
}

func newRun(t *testing.T, cfg Config) (*run, error) {
	t.Helper()
	cluster, cli, eps, err := startEtcd(t, cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Launcher.Host(), "0"))
	if err != nil {
		return nil, err
	}
	r := &run{t: t, cfg: cfg, cluster: cluster, etcd: cli, endpoints: eps, down: map[int]bool{}, ln: ln, start: time.Now(),
		closed: make(chan struct{}), changed: make(chan struct{}), procs: map[string]*proc{}, claims: map[*Step]chan struct{}{}}
	for _, w := range cfg.Workers {
		r.procs[w] = &proc{name: w, reached: map[string]int{}, held: map[string]int{}, served: make(chan struct{})}
	}
	go r.accept()
	return r, nil
}

// close kills every worker still running and stops the control listener.
func (r *run) close() {
	r.mu.Lock()
	select {
	case <-r.closed:
	default:
		close(r.closed)
	}
	procs := r.procs
	r.mu.Unlock()
	r.ln.Close()
	for _, p := range procs {
		if p.h != nil {
			p.h.Thaw()
			p.h.Kill()
		}
		p.etcdProxies((*proxy).close)
		if p.store != nil {
			p.store.close()
		}
	}
	r.undo.Wait() // a crashed server restarts, for the next test
}

// fail ends the test with err and the timelines so far.
func (r *run) fail(err error) {
	r.t.Helper()
	r.mu.Lock()
	tl := r.hist.Timelines()
	var out bytes.Buffer
	for _, w := range r.cfg.Workers {
		if o := r.procs[w].out.String(); o != "" {
			fmt.Fprintf(&out, "--- output of worker %s:\n%s", w, o)
		}
	}
	r.mu.Unlock()
	r.t.Fatalf("%v\nworkers' timelines:\n%s%s", err, tl, out.String())
}

// event records an event of worker (or server) w.
func (r *run) event(w, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eventLocked(w, format, args...)
}

// eventLocked records an event of worker w and wakes every waiter.
func (r *run) eventLocked(w, format string, args ...any) int {
	r.seq++
	r.hist.Events = append(r.hist.Events, Event{Seq: r.seq, At: time.Since(r.start), Worker: w, What: fmt.Sprintf(format, args...)})
	r.wakeLocked()
	return r.seq
}

// wakeLocked wakes every waitFor.
func (r *run) wakeLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// waitFor blocks until cond (called with r.mu held) is true or the run is closed.
func (r *run) waitFor(cond func() bool) bool {
	for {
		r.mu.Lock()
		if cond() {
			r.mu.Unlock()
			return true
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-r.closed:
			return false
		}
	}
}

func (r *run) startWorker(p *proc) error {
	prs, store, err := r.proxies(p)
	if err != nil {
		return err
	}
	args := []string{"-test.run=" + runPattern(r.t.Name()), "-test.count=1", "-test.timeout=0"}
	env := []string{workerEnv + "=" + p.name + " " + r.ln.Addr().String()}
	r.mu.Lock()
	defer r.mu.Unlock()
	p.etcd, p.store = prs, store
	h, err := r.cfg.Launcher.Launch(r.t, p.name, args, env, &p.out)
	if err != nil {
		return err
	}
	p.h = h
	p.started = true
	r.eventLocked(p.name, "started (%s)", h)
	go r.wait(p)
	return nil
}

// proxies starts a worker's proxies: one to each etcd member, one to the store
// server if the run has one (reading p's statements when the run is wired).
func (r *run) proxies(p *proc) (etcd []*proxy, store *proxy, err error) {
	host := r.cfg.Launcher.Host()
	defer func() {
		if err != nil {
			for _, pr := range etcd {
				pr.close()
			}
		}
	}()
	for _, ep := range r.endpoints {
		pr, err := newProxy(host, ep)
		if err != nil {
			return etcd, nil, err
		}
		etcd = append(etcd, pr)
	}
	if r.cfg.StoreServer == nil {
		return etcd, nil, nil
	}
	addr, err := r.cfg.StoreServer.Addr()
	if err != nil {
		return etcd, nil, fmt.Errorf("Config.StoreServer.Addr: %w: Config.Setup must take the workers' DSN from this server", err)
	}
	var opts []delayproxy.Option
	if r.wired {
		p.wire = &wire{reached: func() { r.onTheWire(p) }, bad: func(why string) { r.wireBad(p, why) }}
		opts = append(opts, delayproxy.InspectEach(p.wire.hook))
	}
	store, err = newProxy(host, addr, opts...)
	return etcd, store, err
}

// wait records the end of p's process, once its control connection is drained.
func (r *run) wait(p *proc) {
	err := p.h.Wait()
	r.mu.Lock()
	p.waited = true
	hello := p.hello
	r.mu.Unlock()
	if hello {
		<-p.served
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := p.write; w != nil {
		r.endWriteLocked(p, msg{Outcome: CommitUnknown, Err: "the worker ended in the write"})
	}
	p.exited = true
	p.reached[Finished]++
	what := "finished"
	if err != nil {
		what = "ended: " + err.Error()
	}
	r.eventLocked(p.name, "%s", what)
}

func (r *run) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.serve(c)
	}
}

// serve answers one worker's control connection.
func (r *run) serve(c net.Conn) {
	defer c.Close()
	dec, enc := json.NewDecoder(c), json.NewEncoder(c)
	var hello msg
	if err := dec.Decode(&hello); err != nil {
		return
	}
	r.mu.Lock()
	p := r.procs[hello.Worker]
	if p == nil || p.hello || p.waited {
		r.mu.Unlock()
		return
	}
	p.hello = true
	defer close(p.served)
	r.mu.Unlock()
	if enc.Encode(r.config(p)) != nil {
		return
	}
	for {
		var m msg
		if err := dec.Decode(&m); err != nil {
			return
		}
		r.handle(p, m)
		if enc.Encode(msg{Kind: "go"}) != nil {
			return
		}
	}
}

// config is what worker p is told once it says hello.
func (r *run) config(p *proc) msg {
	m := msg{Kind: "config", Prefix: prefix, TTL: r.cfg.TTL, Data: r.data}
	for _, pr := range p.etcd {
		m.Endpoints = append(m.Endpoints, pr.url())
	}
	if p.store != nil {
		m.StoreAddr, _ = r.cfg.StoreServer.Addr()
		m.StoreProxy = strings.TrimPrefix(p.store.url(), "http://")
	}
	return m
}
