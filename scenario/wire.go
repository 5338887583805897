package scenario

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// wire holds a worker's write in flight on its store proxy. Armed when the
// worker begins a recorded write that a step waits for, each connection's hook
// keeps the first chunk that runs a statement (delayproxy.Keep) and drops the
// worker's cancel requests until the store has answered it.
type wire struct {
	mu       sync.Mutex
	armed    bool
	held     bool          // a statement is kept, or delivered and not yet answered
	released bool          // delivered: the next answer on its connection is the store's
	answered chan struct{} // closed when the store answers the held statement
	reached  func()        // the run's record of the point
	bad      func(string)  // a connection the kit cannot read
}

// hook is the delayproxy hook of one connection.
func (w *wire) hook() func(up bool, data []byte) delayproxy.Action {
	var f pgFrames
	var mine atomic.Bool // this connection's statement is the held one
	return func(up bool, data []byte) delayproxy.Action {
		if !up {
			if mine.Load() {
				w.answer()
			}
			return delayproxy.Forward
		}
		c := f.feed(data)
		switch {
		case c.bad != "":
			w.bad(c.bad)
		case c.cancel && w.holding():
			return delayproxy.Sever
		case c.runs && w.take():
			mine.Store(true)
			w.reached()
			return delayproxy.Keep
		}
		return delayproxy.Forward
	}
}

func (w *wire) arm(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = on
}

func (w *wire) take() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.held {
		return false
	}
	w.armed, w.held, w.released = false, true, false
	w.answered = make(chan struct{})
	return true
}

func (w *wire) holding() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

func (w *wire) answer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held && w.released {
		w.held = false
		close(w.answered)
	}
}

// armLocked arms p's wire when a step not yet met waits for p's OnTheWire, at
// the start of p's write; a worker whose statements bypass its proxy fails
// that step at once.
func (r *run) armLocked(p *proc) {
	if p.wire == nil || !r.awaitsLocked(p.name, OnTheWire) {
		return
	}
	if !p.routed {
		p.wireErr = fmt.Sprintf("worker %s began a write, but its statements do not pass the kit's proxy to the store: build its DSN with Worker.StoreDSN", p.name)
		r.wakeLocked()
		return
	}
	p.wire.arm(true)
}

// awaitsLocked reports whether a step not yet met waits for worker's point.
func (r *run) awaitsLocked(worker, point string) bool {
	return slices.ContainsFunc(r.pending, func(s *Step) bool {
		_, taken := r.claims[s]
		return !taken && s.when != nil && s.when.worker == worker && s.when.name == point
	})
}

// onTheWire records that p's statement is held, meeting the step that waits
// for it (which acts while the worker waits for its answer).
func (r *run) onTheWire(p *proc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.reached[OnTheWire]++
	r.eventLocked(p.name, "reached %q", OnTheWire)
	r.claimLocked(p.name, OnTheWire)
}

// wireBad fails p's OnTheWire step, if one waits, with why its connection
// cannot be read.
func (r *run) wireBad(p *proc, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.wireErr == "" && r.awaitsLocked(p.name, OnTheWire) {
		p.wireErr = fmt.Sprintf("worker %s: %s", p.name, why)
		r.wakeLocked()
	}
}

// releaseWire makes the end of a step met at p's OnTheWire deliver the held
// statement first: before undo, or at once for a fault that does not last.
func (r *run) releaseWire(p *proc, undo func()) func() {
	if undo == nil {
		r.deliver(p)
		return nil
	}
	return func() { r.deliver(p); undo() }
}

// deliver sends p's held statement to the store and waits, a lease at most,
// for its answer, so the worker finds it when it wakes.
func (r *run) deliver(p *proc) {
	w := p.wire
	w.mu.Lock()
	w.released = true
	answered := w.answered
	w.mu.Unlock()
	p.store.release()
	if answered == nil {
		return
	}
	what := "the held statement delivered to the store: answered"
	select {
	case <-answered:
	case <-time.After(r.cfg.TTL):
		what = fmt.Sprintf("the held statement delivered to the store: no answer within %v", r.cfg.TTL)
	case <-r.closed:
	}
	r.event(p.name, "%s", what)
}
