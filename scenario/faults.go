package scenario

import (
	"fmt"
	"time"
)

// Start starts a worker's process. Without any Start step, every worker starts
// when the run begins.
func Start(worker string) *Step { return &Step{fault: start{worker}} }

// Freeze stops the worker's process (SIGSTOP), as a long GC pause or a suspended VM
// does, and wakes it (SIGCONT) at its Until point or, by default, once etcd has
// expired every lock it holds.
func Freeze(worker string) *Step { return &Step{fault: freeze{worker}} }

// Kill kills the worker's process (SIGKILL). A write it was in is commit unknown.
func Kill(worker string) *Step { return &Step{fault: kill{worker}} }

// CutOff cuts the worker's connections to etcd (the proxies the kit runs for it)
// until its Until point or, by default, until etcd has expired its locks.
func CutOff(worker string) *Step { return &Step{fault: cutOff{worker}} }

// Slow delays every chunk of the worker's etcd traffic by d, each way, until its
// Until point or, by default, until the worker finishes. Each of the lock
// client's round trips then takes 2d more: see the package doc for what that
// costs an acquire.
func Slow(worker string, d time.Duration) *Step {
	s := &Step{fault: slow{worker, d}}
	if d <= 0 {
		s.err = fmt.Sprintf("Slow(%q, %v): the delay must be positive", worker, d)
	}
	return s
}

// checkWorker is the check every fault on a worker shares: the worker exists, is
// not faulted once finished, and Until is given only to a fault that lasts.
func checkWorker(verb, worker string, lasts bool, known map[string]bool, s *Step) string {
	switch {
	case !known[worker]:
		return fmt.Sprintf("no worker %q in Config.Workers", worker)
	case s.until != nil && !lasts:
		return fmt.Sprintf("%s does not last: Until has no meaning for it", verb)
	case s.when != nil && s.when.name == Finished && s.when.worker == worker:
		return fmt.Sprintf("%s acts on a finished worker: a finished worker cannot be faulted", verb)
	}
	return ""
}

// liveLocked returns the worker's process, or an error saying why it cannot be
// faulted now.
func (r *run) liveLocked(worker string) (*proc, error) {
	p := r.procs[worker]
	switch {
	case !p.started:
		return nil, fmt.Errorf("worker %s is not started: add scenario.Start(%q) before it", p.name, p.name)
	case p.exited:
		return nil, fmt.Errorf("worker %s has already finished, so it cannot be faulted: act on it at a point it reaches (When)", p.name)
	}
	return p, nil
}

// whileLive makes undo run under r.mu, and only while p's process runs.
func (r *run) whileLive(p *proc, undo func()) func() {
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !p.exited {
			undo()
		}
	}
}

type start struct{ worker string }

func (f start) String() string { return fmt.Sprintf("Start(%q)", f.worker) }

func (f start) check(_ Config, known map[string]bool, s *Step) string {
	switch {
	case !known[f.worker]:
		return fmt.Sprintf("no worker %q in Config.Workers", f.worker)
	case s.until != nil:
		return "Start does not last: Until has no meaning for it"
	case s.when != nil && s.when.worker == f.worker:
		return "a worker cannot reach a point before it starts"
	}
	return ""
}

func (f start) act(r *run, _ *Step) (func(), error) {
	p := r.procs[f.worker]
	r.mu.Lock()
	started := p.started
	r.mu.Unlock()
	if started {
		return nil, fmt.Errorf("worker %s is already started", p.name)
	}
	return nil, r.startWorker(p)
}

func (start) end(*run) {}

type kill struct{ worker string }

func (f kill) String() string { return fmt.Sprintf("Kill(%q)", f.worker) }

func (f kill) check(_ Config, known map[string]bool, s *Step) string {
	return checkWorker("Kill", f.worker, false, known, s)
}

func (f kill) act(r *run, _ *Step) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.liveLocked(f.worker)
	if err != nil {
		return nil, err
	}
	if err := p.h.Kill(); err != nil {
		return nil, err
	}
	r.eventLocked(p.name, "killed")
	return nil, nil
}

func (kill) end(*run) {}

type freeze struct{ worker string }

func (f freeze) String() string { return fmt.Sprintf("Freeze(%q)", f.worker) }

func (f freeze) check(_ Config, known map[string]bool, s *Step) string {
	if msg := checkWorker("Freeze", f.worker, true, known, s); msg != "" {
		return msg
	}
	if s.until != nil && s.until.worker == f.worker {
		return "a frozen worker reaches nothing: Until must name another worker"
	}
	return ""
}

func (f freeze) act(r *run, _ *Step) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.liveLocked(f.worker)
	if err != nil {
		return nil, err
	}
	if err := p.h.Freeze(); err != nil {
		return nil, err
	}
	r.eventLocked(p.name, "frozen")
	return r.whileLive(p, func() { p.h.Thaw(); r.eventLocked(p.name, "thawed") }), nil
}

func (f freeze) end(r *run) { r.waitLocksGone(r.procs[f.worker]) }

type cutOff struct{ worker string }

func (f cutOff) String() string { return fmt.Sprintf("CutOff(%q)", f.worker) }

func (f cutOff) check(_ Config, known map[string]bool, s *Step) string {
	return checkWorker("CutOff", f.worker, true, known, s)
}

func (f cutOff) act(r *run, _ *Step) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.liveLocked(f.worker)
	if err != nil {
		return nil, err
	}
	p.etcdProxies(func(pr *proxy) { pr.setCut(true) })
	r.eventLocked(p.name, "cut off from etcd")
	return r.whileLive(p, func() {
		p.etcdProxies(func(pr *proxy) { pr.setCut(false) })
		r.eventLocked(p.name, "reconnected to etcd")
	}), nil
}

func (f cutOff) end(r *run) { r.waitLocksGone(r.procs[f.worker]) }

type slow struct {
	worker string
	delay  time.Duration
}

func (f slow) String() string { return fmt.Sprintf("Slow(%q)", f.worker) }

func (f slow) check(_ Config, known map[string]bool, s *Step) string {
	return checkWorker("Slow", f.worker, true, known, s)
}

func (f slow) act(r *run, _ *Step) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.liveLocked(f.worker)
	if err != nil {
		return nil, err
	}
	p.etcdProxies(func(pr *proxy) { pr.setDelay(f.delay) })
	r.eventLocked(p.name, "etcd traffic slowed by %v", f.delay)
	return r.whileLive(p, func() {
		p.etcdProxies(func(pr *proxy) { pr.setDelay(0) })
		r.eventLocked(p.name, "etcd traffic at full speed")
	}), nil
}

func (f slow) end(r *run) {
	p := r.procs[f.worker]
	r.waitFor(func() bool { return p.exited })
}
