package scenario

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// Outcome is how a recorded write ended.
type Outcome string

// The outcomes of a write.
const (
	Acknowledged  Outcome = "acknowledged"   // it returned nil: it must be in the store
	RefusedStale  Outcome = "refused stale"  // fence.ErrStale: it must not be
	RefusedLost   Outcome = "refused lost"   // fence.ErrLost: the lock was lost first, nothing written
	CommitUnknown Outcome = "commit unknown" // fence.ErrCommitUnknown, another error, or the worker died in it
	RolledBack    Outcome = "rolled back"    // failed, and the store rolled it back: it must not be in the store
)

// WriteRecord is one write a worker made through Worker.Write. Begin and End are
// positions in the run's order of events: a write whose Begin is after another's
// End started after the other was acknowledged.
type WriteRecord struct {
	Worker, Resource, Value string
	Token                   fence.Token
	Outcome                 Outcome
	Err                     string
	Begin, End              int
}

// GrantRecord is one grant a worker got through Worker.Acquire or
// Worker.AcquirePermit. A permit's Resource is its slot (name/NNNN); Permit is
// the semaphore's name, Permits its n, and Holders how many of its slots etcd
// held at the grant's revision (the token), this one included (0: not read).
type GrantRecord struct {
	Worker, Resource string
	Token            fence.Token
	Seq              int
	Permit           string
	Permits, Holders int
}

// Event is one line of a worker's timeline. What is its text (the package doc
// lists them); Outcome is set on a write's outcome event only ("write "res"
// token N value "v": <outcome>[: <error>]"), whose WriteRecord has End == Seq.
type Event struct {
	Seq     int
	At      time.Duration // since the run started
	Worker  string
	What    string
	Outcome Outcome
}

// History is what a run recorded and the store's final state (Config.Read's answer).
// Commits, Kept and Crashes are the store's own account, for a harness that reads it
// back (the kit's runs leave them nil, and Check then skips their rules): the writes
// it committed, in order; per resource, the tokens of the writes its final state
// still holds, in order (a read-modify-write appends its token to what it read); and
// per worker, how many times it crashed.
type History struct {
	Writes  []WriteRecord
	Grants  []GrantRecord
	Events  []Event
	Final   map[string]string
	Commits []CommitRecord
	Kept    map[string][]fence.Token
	Crashes map[string]int
}

// ViolationError is History.Check's failure: each broken rule, and the workers'
// timelines. It is errors.Is ErrViolation.
type ViolationError struct {
	Violations []string
	Timelines  string
}

func (e *ViolationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario: %d violation(s) of the fencing guarantee:\n", len(e.Violations))
	for _, v := range e.Violations {
		fmt.Fprintf(&b, "  - %s\n", v)
	}
	b.WriteString("workers' timelines:\n")
	b.WriteString(e.Timelines)
	return b.String()
}

func (e *ViolationError) Unwrap() error { return ErrViolation }

// Check returns nil when the history keeps the rules in the package doc (those of
// Commits, Kept and Crashes only when they are set), and a *ViolationError naming
// each broken one otherwise.
func (h *History) Check() error {
	var out []string
	for _, res := range h.resources() {
		out = append(out, h.checkGrants(res)...)
		out = append(out, h.checkOrder(res)...)
		out = append(out, h.checkFinal(res)...)
		out = append(out, h.checkCommits(res)...)
		out = append(out, h.checkKept(res)...)
	}
	out = append(out, h.checkUnrecorded()...)
	out = append(out, h.checkPermits()...)
	if len(out) == 0 {
		return nil
	}
	return &ViolationError{Violations: out, Timelines: h.Timelines()}
}

func (h *History) resources() []string {
	var rs []string
	for _, w := range h.Writes {
		rs = append(rs, w.Resource)
	}
	for _, g := range h.Grants {
		rs = append(rs, g.Resource)
	}
	for _, c := range h.Commits {
		rs = append(rs, c.Resource)
	}
	rs = slices.AppendSeq(rs, maps.Keys(h.Kept))
	slices.Sort(rs)
	return slices.Compact(rs)
}

func (h *History) checkGrants(res string) []string {
	by := map[fence.Token][]string{}
	for _, g := range h.Grants {
		if g.Resource == res {
			by[g.Token] = append(by[g.Token], g.Worker)
		}
	}
	var out []string
	for _, tok := range slices.Sorted(maps.Keys(by)) {
		if ws := by[tok]; len(ws) > 1 {
			out = append(out, fmt.Sprintf("resource %q: token %d granted to %d holders: %s", res, tok, len(ws), strings.Join(ws, ", ")))
		}
	}
	return out
}

// checkOrder finds acknowledged writes of a lower token that began after a write of
// a higher token was acknowledged.
func (h *History) checkOrder(res string) []string {
	acks := h.writes(res, func(w WriteRecord) bool { return w.Outcome == Acknowledged })
	var out []string
	for _, hi := range acks {
		for _, lo := range acks {
			if lo.Token < hi.Token && lo.Begin > hi.End {
				out = append(out, fmt.Sprintf("resource %q: %s's write at token %d (%q) landed after %s's write at token %d (%q) was acknowledged",
					res, lo.Worker, lo.Token, lo.Value, hi.Worker, hi.Token, hi.Value))
			}
		}
	}
	return out
}

// checkFinal compares the final value with the writes that could have made it.
func (h *History) checkFinal(res string) []string {
	acks := h.writes(res, func(w WriteRecord) bool { return w.Outcome == Acknowledged })
	final, ok := h.Final[res]
	var makers []WriteRecord
	if ok {
		makers = h.landed(res, final)
	}
	refused := h.writes(res, func(w WriteRecord) bool {
		return ok && w.Value == final && (w.Outcome == RefusedStale || w.Outcome == RefusedLost || w.Outcome == RolledBack)
	})
	if len(makers) == 0 && len(refused) > 0 {
		r := refused[0]
		return []string{fmt.Sprintf("resource %q: final value %q was written by %s at token %d, whose write was %s", res, final, r.Worker, r.Token, r.Outcome)}
	}
	if len(acks) == 0 {
		return nil
	}
	top := slices.MaxFunc(acks, func(a, b WriteRecord) int { return cmp.Compare(a.Token, b.Token) })
	if !ok {
		return []string{fmt.Sprintf("resource %q: %s's acknowledged write at token %d (%q) is lost: Read returned no value for the resource", res, top.Worker, top.Token, top.Value)}
	}
	if len(makers) == 0 {
		return []string{fmt.Sprintf("resource %q: %s's acknowledged write at token %d (%q) is lost: the final value %q is no recorded write's", res, top.Worker, top.Token, top.Value, final)}
	}
	best := slices.MaxFunc(makers, func(a, b WriteRecord) int { return cmp.Compare(a.Token, b.Token) })
	if best.Token < top.Token {
		return []string{fmt.Sprintf("resource %q: %s's acknowledged write at token %d (%q) is lost: the final value %q is %s's write at the lower token %d",
			res, top.Worker, top.Token, top.Value, final, best.Worker, best.Token)}
	}
	return nil
}

func (h *History) writes(res string, keep func(WriteRecord) bool) []WriteRecord {
	var out []WriteRecord
	for _, w := range h.Writes {
		if w.Resource == res && keep(w) {
			out = append(out, w)
		}
	}
	return out
}

// Timelines renders every worker's events, one line per worker, in the run's order.
func (h *History) Timelines() string {
	var names []string
	by := map[string][]string{}
	for _, e := range h.Events {
		if _, seen := by[e.Worker]; !seen {
			names = append(names, e.Worker)
		}
		by[e.Worker] = append(by[e.Worker], fmt.Sprintf("#%d %s %s", e.Seq, e.At.Round(time.Millisecond), e.What))
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: %s\n", n, strings.Join(by[n], "; "))
	}
	return b.String()
}

// checkPermits finds a permit granted while more of its semaphore's slots were
// held than the largest n any grant of it asked for (n is per call: after a
// lowered n, holders of higher slots keep them until they release).
func (h *History) checkPermits() []string {
	most := map[string]int{}
	for _, g := range h.Grants {
		most[g.Permit] = max(most[g.Permit], g.Permits)
	}
	var out []string
	for _, g := range h.Grants {
		if g.Permit != "" && g.Holders > most[g.Permit] {
			out = append(out, fmt.Sprintf("semaphore %q: %d permits held at token %d (%s's grant of %q), over its %d",
				g.Permit, g.Holders, g.Token, g.Worker, g.Resource, most[g.Permit]))
		}
	}
	return out
}
