package scenario

import (
	"fmt"
	"time"
)

// Step is one fault (or start) on the run's timeline. Steps run in order: each
// waits for its When point (if any), acts, and the run goes on to the next; a
// fault that lasts (Freeze, CutOff, Slow, CutOffStore, CrashEtcd, KillEtcdLeader,
// CrashStore with Until) is undone when its Until point is reached, while later
// steps run.
type Step struct {
	fault fault
	after time.Duration
	when  *point
	until *point
	err   string
}

// fault is what a step does, one type per verb: to a worker (faults.go) or to the
// servers the run started (infra.go). The run knows nothing of the verbs.
type fault interface {
	// String is the constructor call that made it, as in Freeze("a").
	String() string
	// check says what is wrong with the fault in step s of the run cfg describes,
	// before anything starts, or "".
	check(cfg Config, known map[string]bool, s *Step) string
	// act applies the fault. A fault that lasts returns its undo, which the run
	// calls (without r.mu) at s's Until point or once end returns.
	act(r *run, s *Step) (undo func(), err error)
	// end blocks until a lasting fault without Until should be undone, or the run
	// is closed.
	end(r *run)
}

type point struct{ worker, name string }

func (p *point) String() string { return fmt.Sprintf("%s reaches %q", p.worker, p.name) }

// When makes the step act when worker reaches point (the worker waits there until
// the step has acted), rather than at once.
func (s *Step) When(worker, point string) *Step {
	s.when = newPoint(worker, point)
	return s
}

// After makes the step act d after the previous step acted, rather than at once:
// a fault at a time, for a job with no point to name. It cannot be combined with
// When.
func (s *Step) After(d time.Duration) *Step {
	s.after = d
	if d <= 0 {
		s.err = fmt.Sprintf("After(%v): the wait must be positive", d)
	}
	return s
}

// Until makes a lasting fault end when worker reaches point, rather than at its
// default end (each verb's doc says which). Finished is reached when the worker's
// process ends.
func (s *Step) Until(worker, point string) *Step {
	s.until = newPoint(worker, point)
	return s
}

func newPoint(worker, name string) *point { return &point{worker: worker, name: name} }

func (s *Step) String() string {
	str := s.fault.String()
	if s.when != nil {
		str += fmt.Sprintf(".When(%q, %q)", s.when.worker, s.when.name)
	}
	if s.after != 0 {
		str += fmt.Sprintf(".After(%v)", s.after)
	}
	if s.until != nil {
		str += fmt.Sprintf(".Until(%q, %q)", s.until.worker, s.until.name)
	}
	return str
}

// check says what is wrong with step i, for the run cfg describes.
func (s *Step) check(i int, cfg Config, known map[string]bool) error {
	if s == nil || s.fault == nil {
		return fmt.Errorf("scenario: step %d is nil", i+1)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("scenario: step %d %s: %s", i+1, s, fmt.Sprintf(format, args...))
	}
	switch {
	case s.err != "":
		return bad("%s", s.err)
	case s.when != nil && !known[s.when.worker]:
		return bad("When names no worker of Config.Workers: %q", s.when.worker)
	case s.until != nil && !known[s.until.worker]:
		return bad("Until names no worker of Config.Workers: %q", s.until.worker)
	case s.after != 0 && s.when != nil:
		return bad("After and When both say when to act: give one")
	case s.until != nil && s.until.name == OnTheWire:
		return bad("OnTheWire is a When point only (the statement is held until that step ends): Until cannot wait for it")
	case s.when != nil && s.when.name == OnTheWire && cfg.StoreServer == nil:
		return bad("OnTheWire needs the worker's statements to pass the kit's proxy to the store: set Config.StoreServer to the server Config.Setup takes the DSN from (a *pgtest.Server) and build the worker's DSN with Worker.StoreDSN. An embedded store such as SQLite sends nothing over a network, so none of its writes is ever in flight: freeze at InStore there (see the package doc)")
	}
	if msg := s.fault.check(cfg, known, s); msg != "" {
		return bad("%s", msg)
	}
	return nil
}
