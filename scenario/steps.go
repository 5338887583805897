package scenario

import (
	"fmt"
	"time"
)

// Step is one fault (or start) on the run's timeline. Steps run in order: each
// waits for its When point (if any), acts, and the run goes on to the next; a
// fault that lasts (Freeze, CutOff, Slow) is undone when its Until point is
// reached, while later steps run.
type Step struct {
	verb   string
	worker string
	delay  time.Duration
	after  time.Duration
	when   *point
	until  *point
	err    string
}

type point struct{ worker, name string }

func (p *point) String() string { return fmt.Sprintf("%s reaches %q", p.worker, p.name) }

// Start starts a worker's process. Without any Start step, every worker starts
// when the run begins.
func Start(worker string) *Step { return &Step{verb: "Start", worker: worker} }

// Freeze stops the worker's process (SIGSTOP), as a long GC pause or a suspended VM
// does, and wakes it (SIGCONT) at its Until point or, by default, once etcd has
// expired every lock it holds.
func Freeze(worker string) *Step { return &Step{verb: "Freeze", worker: worker} }

// Kill kills the worker's process (SIGKILL). A write it was in is commit unknown.
func Kill(worker string) *Step { return &Step{verb: "Kill", worker: worker} }

// CutOff cuts the worker's connections to etcd (the proxy the kit runs for it)
// until its Until point or, by default, until etcd has expired its locks.
func CutOff(worker string) *Step { return &Step{verb: "CutOff", worker: worker} }

// Slow delays every chunk of the worker's etcd traffic by d, each way, until its
// Until point or, by default, until the worker finishes.
func Slow(worker string, d time.Duration) *Step {
	s := &Step{verb: "Slow", worker: worker, delay: d}
	if d <= 0 {
		s.err = fmt.Sprintf("Slow(%q, %v): the delay must be positive", worker, d)
	}
	return s
}

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

// Until makes a lasting fault (Freeze, CutOff, Slow) end when worker reaches point.
// Finished is reached when the worker's process ends.
func (s *Step) Until(worker, point string) *Step {
	s.until = newPoint(worker, point)
	return s
}

func newPoint(worker, name string) *point { return &point{worker: worker, name: name} }

func (s *Step) String() string {
	str := fmt.Sprintf("%s(%q)", s.verb, s.worker)
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

// check says what is wrong with step i, for a run of these workers.
func (s *Step) check(i int, known map[string]bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("scenario: step %d %s: %s", i+1, s, fmt.Sprintf(format, args...))
	}
	switch {
	case s == nil:
		return fmt.Errorf("scenario: step %d is nil", i+1)
	case s.err != "":
		return bad("%s", s.err)
	case !known[s.worker]:
		return bad("no worker %q in Config.Workers", s.worker)
	case s.when != nil && !known[s.when.worker]:
		return bad("When names no worker of Config.Workers: %q", s.when.worker)
	case s.until != nil && !known[s.until.worker]:
		return bad("Until names no worker of Config.Workers: %q", s.until.worker)
	case s.after != 0 && s.when != nil:
		return bad("After and When both say when to act: give one")
	case s.until != nil && (s.verb == "Start" || s.verb == "Kill"):
		return bad("%s does not last: Until has no meaning for it", s.verb)
	case s.verb == "Start" && s.when != nil && s.when.worker == s.worker:
		return bad("a worker cannot reach a point before it starts")
	case s.verb == "Freeze" && s.until != nil && s.until.worker == s.worker:
		return bad("a frozen worker reaches nothing: Until must name another worker")
	case s.when != nil && s.when.name == Finished && s.when.worker == s.worker:
		return bad("%s acts on a finished worker: a finished worker cannot be faulted", s.verb)
	}
	return nil
}
