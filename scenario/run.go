package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/lockclient/locktest"
)

// prefix is the etcd key prefix of the workers' locks.
const prefix = "/fencegate/scenario/"

// run is one scenario in the test process.
type run struct {
	t       *testing.T
	cfg     Config
	etcd    *clientv3.Client
	target  string
	ln      net.Listener
	data    string
	start   time.Time
	undo    sync.WaitGroup
	closed  chan struct{}
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	seq     int
	procs   map[string]*proc
	pending []*Step                 // the steps not yet done
	claims  map[*Step]chan struct{} // a held reach per step whose When it met
	hist    History
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
	out     syncBuffer
	reached map[string]int
	held    map[string]int // locks granted: resource -> token
	started bool
	exited  bool
	hello   bool
	waited  bool
	served  chan struct{} // closed when the control connection is drained
	write   *WriteRecord  // the write in progress
}

func newRun(t *testing.T, cfg Config, etcd *locktest.Cluster) (*run, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Launcher.Host(), "0"))
	if err != nil {
		return nil, err
	}
	r := &run{t: t, cfg: cfg, etcd: etcd.Client(t), target: etcd.Endpoints()[0], ln: ln, start: time.Now(),
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
	}
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

// eventLocked records an event of worker w and wakes every waiter.
func (r *run) eventLocked(w, format string, args ...any) int {
	r.seq++
	r.hist.Events = append(r.hist.Events, Event{Seq: r.seq, At: time.Since(r.start), Worker: w, What: fmt.Sprintf(format, args...)})
	close(r.changed)
	r.changed = make(chan struct{})
	return r.seq
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
	pr, err := newProxy(r.cfg.Launcher.Host(), r.target)
	if err != nil {
		return err
	}
	args := []string{"-test.run=" + runPattern(r.t.Name()), "-test.count=1", "-test.timeout=0"}
	env := []string{workerEnv + "=" + p.name + " " + r.ln.Addr().String()}
	r.mu.Lock()
	defer r.mu.Unlock()
	p.etcd = []*proxy{pr}
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
	if enc.Encode(msg{Kind: "config", Endpoint: p.etcd[0].url(), Prefix: prefix, TTL: r.cfg.TTL, Data: r.data}) != nil {
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
