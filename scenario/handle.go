package scenario

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// handle records one message of worker p; for a reach that a pending step waits
// for, it returns only once that step has acted.
func (r *run) handle(p *proc, m msg) {
	var g GrantRecord
	if m.Kind == "reach" && m.Point == Granted {
		g = r.grant(p, m) // reads etcd: before r.mu
	}
	r.mu.Lock()
	switch m.Kind {
	case "reach":
		p.reached[m.Point]++
		if m.Point == Granted {
			p.held[m.Resource] = int(m.Token)
			what := fmt.Sprintf("granted %q token %d", m.Resource, m.Token)
			if g.Permit != "" {
				what += fmt.Sprintf(" (permit of %q: %d of %d held)", g.Permit, g.Holders, g.Permits)
			}
			g.Seq = r.eventLocked(p.name, "%s", what)
			r.hist.Grants = append(r.hist.Grants, g)
		} else if m.Point != AboutToWrite && m.Point != Wrote {
			r.eventLocked(p.name, "reached %q", m.Point)
		} else {
			r.eventLocked(p.name, "%s", m.Point) // wakes the steps waiting for it
		}
		if held := r.claimLocked(p.name, m.Point); held != nil {
			r.mu.Unlock()
			select {
			case <-held:
			case <-r.closed:
			}
			return
		}
	case "route":
		p.routed = true
	case "begin":
		seq := r.eventLocked(p.name, "write %q token %d value %q begins", m.Resource, m.Token, m.Value)
		p.write = &WriteRecord{Worker: p.name, Resource: m.Resource, Token: m.Token, Value: m.Value, Begin: seq}
		r.armLocked(p)
	case "end":
		if p.wire != nil {
			p.wire.arm(false)
		}
		r.endWriteLocked(p, m)
	case "exit":
		if m.Err != "" {
			r.eventLocked(p.name, "job returned %q", m.Err)
			if !m.Fenced {
				r.t.Errorf("scenario: worker %s: the job failed: %s", p.name, m.Err)
			}
		}
	}
	r.mu.Unlock()
}

func (r *run) endWriteLocked(p *proc, m msg) {
	w := p.write
	if w == nil {
		return
	}
	p.write = nil
	w.Outcome, w.Err = m.Outcome, m.Err
	what := string(m.Outcome)
	if m.Err != "" {
		what += ": " + m.Err
	}
	w.End = r.eventLocked(p.name, "write %q token %d value %q: %s", w.Resource, w.Token, w.Value, what)
	r.hist.Events[len(r.hist.Events)-1].Outcome = m.Outcome
	r.hist.Writes = append(r.hist.Writes, *w)
}

func (r *run) setPending(steps []*Step) {
	r.mu.Lock()
	r.pending = steps
	r.mu.Unlock()
}

// claimLocked finds the first step not yet claimed that waits for worker to reach
// point and gives it a channel to release the worker with.
func (r *run) claimLocked(worker, point string) chan struct{} {
	for _, s := range r.pending {
		if _, taken := r.claims[s]; !taken && s.when != nil && s.when.worker == worker && s.when.name == point {
			ch := make(chan struct{})
			r.claims[s] = ch
			return ch
		}
	}
	return nil
}

// step runs step i: waits for its When point, acts, and schedules its undo.
func (r *run) step(i int, s *Step) error {
	if s.when != nil {
		wp := r.procs[s.when.worker]
		var release chan struct{}
		var wireErr string
		ok := r.waitFor(func() bool {
			release, wireErr = r.claims[s], wp.wireErr
			return release != nil || wp.exited || !wp.started || wireErr != "" && s.when.name == OnTheWire
		})
		switch {
		case !ok:
			return fmt.Errorf("scenario: step %d %s: the run ended", i+1, s)
		case release == nil && !wp.started:
			return fmt.Errorf("scenario: step %d %s waits for worker %s, which no earlier step started: add scenario.Start(%q) before it", i+1, s, wp.name, wp.name)
		case release == nil && wireErr != "" && s.when.name == OnTheWire:
			return fmt.Errorf("scenario: step %d %s: %s", i+1, s, wireErr)
		case release == nil && s.when.name == OnTheWire:
			return fmt.Errorf("scenario: step %d %s: worker %s finished without sending a statement through its store proxy during a recorded write: OnTheWire holds a statement of a write made with Worker.Write or Store, on a connection built with Worker.StoreDSN", i+1, s, wp.name)
		case release == nil && s.when.name != Finished:
			return fmt.Errorf("scenario: step %d %s: worker %s finished without reaching %q: check the point's name, or that the job reaches it", i+1, s, wp.name, s.when.name)
		}
		if release != nil {
			defer close(release)
		}
	}
	if s.after > 0 {
		select {
		case <-time.After(s.after):
		case <-r.closed:
			return fmt.Errorf("scenario: step %d %s: the run ended", i+1, s)
		}
	}
	undo, err := s.fault.act(r, s)
	if err != nil {
		return fmt.Errorf("scenario: step %d %s: %w", i+1, s, err)
	}
	if s.when != nil && s.when.name == OnTheWire {
		undo = r.releaseWire(r.procs[s.when.worker], undo)
	}
	if undo != nil {
		r.undo.Add(1)
		go r.until(s, undo)
	}
	return nil
}

// until waits for s's Until point (or its fault's default end) and undoes the
// fault.
func (r *run) until(s *Step, undo func()) {
	defer r.undo.Done()
	if s.until != nil {
		up := r.procs[s.until.worker]
		base := r.reachedNow(up, s.until.name)
		r.waitFor(func() bool { return up.reached[s.until.name] > base || up.exited })
	} else {
		s.fault.end(r)
	}
	undo()
}

func (r *run) reachedNow(p *proc, point string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return p.reached[point]
}

// waitLocksGone polls etcd until none of p's granted locks is still held by it.
func (r *run) waitLocksGone(p *proc) {
	for {
		r.mu.Lock()
		held := map[string]int{}
		for k, v := range p.held {
			held[k] = v
		}
		r.mu.Unlock()
		gone := true
		for res, tok := range held {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := r.etcd.Get(ctx, prefix+res)
			cancel()
			if err != nil || len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == int64(tok) {
				gone = false
			}
		}
		if gone {
			return
		}
		select {
		case <-r.closed:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// finish waits for every started worker to end and every fault to be undone, then
// reads the final state.
func (r *run) finish() *History {
	r.t.Helper()
	for _, w := range r.cfg.Workers {
		p := r.procs[w]
		if !r.waitFor(func() bool { return !p.started || p.exited }) {
			r.fail(fmt.Errorf("scenario: the run ended before worker %s finished", w))
		}
		if !p.started {
			r.fail(fmt.Errorf("scenario: worker %s was never started: add scenario.Start(%q), or leave out every Start step to start all workers at once", w, w))
		}
	}
	r.undo.Wait()
	for _, w := range r.cfg.Workers {
		p := r.procs[w]
		r.mu.Lock()
		unrouted := p.cut && !p.routed
		r.mu.Unlock()
		if unrouted {
			r.fail(fmt.Errorf("scenario: CutOffStore(%q) cut nothing: worker %s never connected through its proxy to the store: build its DSN with Worker.StoreDSN", w, w))
		}
	}
	final, err := r.cfg.Read(r.t.Context(), r.data)
	if err != nil {
		r.fail(fmt.Errorf("scenario: Config.Read: %w", err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hist
	h.Final = final
	return &h
}

// syncBuffer is a worker's output, written by its process's pipes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// grant is the record of m, a Granted reach: for a permit, with the number of
// its semaphore's slots etcd held at the grant's revision.
func (r *run) grant(p *proc, m msg) GrantRecord {
	g := GrantRecord{Worker: p.name, Resource: m.Resource, Token: m.Token, Permit: m.Permit, Permits: m.Permits}
	if g.Permit == "" {
		return g
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.etcd.Get(ctx, prefix+g.Permit+"/", clientv3.WithPrefix(), clientv3.WithRev(int64(g.Token)), clientv3.WithCountOnly())
	if err == nil {
		g.Holders = int(resp.Count)
	}
	return g
}
