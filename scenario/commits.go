package scenario

import (
	"fmt"
	"maps"
	"slices"

	"github.com/fencegate/fencegate/fence"
)

// CommitRecord is one write the store holds, read back from the store after the run
// (a ledger row written in the write's own transaction): History.Commits lists them
// in commit order.
type CommitRecord struct {
	Worker, Resource, Value string
	Token                   fence.Token
}

// Counts is a history's size by kind, for a test's log and its expectations.
type Counts struct {
	Grants     int             // lock grants recorded
	Outcomes   map[Outcome]int // recorded writes, by outcome
	Committed  int             // commits the store holds (History.Commits)
	Landed     int             // of the commit-unknown writes, those the store holds
	Unrecorded int             // commits no recorded write explains (a worker crashed after COMMIT)
}

func (c Counts) String() string {
	return fmt.Sprintf("grants %d, acknowledged %d, refused stale %d, refused lost %d, rolled back %d, commit unknown %d (landed %d), committed %d (unrecorded %d)",
		c.Grants, c.Outcomes[Acknowledged], c.Outcomes[RefusedStale], c.Outcomes[RefusedLost], c.Outcomes[RolledBack],
		c.Outcomes[CommitUnknown], c.Landed, c.Committed, c.Unrecorded)
}

// Counts counts the history's grants, writes by outcome and commits.
func (h *History) Counts() Counts {
	c := Counts{Grants: len(h.Grants), Outcomes: map[Outcome]int{}, Committed: len(h.Commits)}
	for _, w := range h.Writes {
		c.Outcomes[w.Outcome]++
		if _, ok := h.commit(w.Resource, w.Token); ok && w.Outcome == CommitUnknown {
			c.Landed++
		}
	}
	for _, cm := range h.Commits {
		if !slices.ContainsFunc(h.Writes, func(w WriteRecord) bool { return w.Resource == cm.Resource && w.Token == cm.Token }) {
			c.Unrecorded++
		}
	}
	return c
}

func (h *History) commit(res string, tok fence.Token) (CommitRecord, bool) {
	for _, c := range h.Commits {
		if c.Resource == res && c.Token == tok {
			return c, true
		}
	}
	return CommitRecord{}, false
}

// checkCommits holds the store's commits of res to the recorded writes (with no
// Commits, the store's account is not known and nothing is checked).
func (h *History) checkCommits(res string) []string {
	if h.Commits == nil {
		return nil
	}
	var out []string
	var prev *CommitRecord
	seen := map[fence.Token]bool{}
	for _, c := range h.Commits {
		if c.Resource != res {
			continue
		}
		if seen[c.Token] {
			out = append(out, fmt.Sprintf("resource %q: token %d committed twice", res, c.Token))
		}
		seen[c.Token] = true
		if prev != nil && c.Token <= prev.Token {
			out = append(out, fmt.Sprintf("resource %q: committed tokens went down: %d (%s) after %d (%s)", res, c.Token, c.Worker, prev.Token, prev.Worker))
		}
		prev = &c
	}
	for _, w := range h.writes(res, func(WriteRecord) bool { return true }) {
		c, ok := h.commit(res, w.Token)
		switch {
		case w.Outcome == Acknowledged && (!ok || c.Worker != w.Worker || c.Value != w.Value):
			out = append(out, fmt.Sprintf("resource %q: %s's acknowledged write at token %d (%q) is not in the store's commits", res, w.Worker, w.Token, w.Value))
		case !ok:
		case w.Outcome == RefusedStale || w.Outcome == RefusedLost || w.Outcome == RolledBack:
			out = append(out, fmt.Sprintf("resource %q: %s's write at token %d (%q) was %s but is in the store's commits", res, w.Worker, w.Token, w.Value, w.Outcome))
		case w.Outcome == CommitUnknown && (c.Worker != w.Worker || c.Value != w.Value):
			out = append(out, fmt.Sprintf("resource %q: %s's write at token %d, outcome unknown, wrote %q but landed as %s's %q", res, w.Worker, w.Token, w.Value, c.Worker, c.Value))
		}
	}
	return out
}

// checkUnrecorded allows each worker one commit with no recorded write per crash:
// a worker killed between its COMMIT and its record.
func (h *History) checkUnrecorded() []string {
	by := map[string]int{}
	for _, c := range h.Commits {
		if !slices.ContainsFunc(h.Writes, func(w WriteRecord) bool { return w.Resource == c.Resource && w.Token == c.Token }) {
			by[c.Worker]++
		}
	}
	var out []string
	for _, w := range slices.Sorted(maps.Keys(by)) {
		if by[w] > h.Crashes[w] {
			out = append(out, fmt.Sprintf("worker %s: %d commits with no recorded write, but it crashed %d times", w, by[w], h.Crashes[w]))
		}
	}
	return out
}

// checkKept holds the writes the store keeps for res (History.Kept; not checked
// when absent) to the commits and the acknowledged writes: each of those must be
// kept, in token order, and nothing else.
func (h *History) checkKept(res string) []string {
	kept, ok := h.Kept[res]
	if !ok {
		return nil
	}
	var out []string
	for i := 1; i < len(kept); i++ {
		if kept[i] <= kept[i-1] {
			out = append(out, fmt.Sprintf("resource %q: kept tokens went down: %v", res, kept))
			break
		}
	}
	for _, w := range h.writes(res, func(w WriteRecord) bool { return w.Outcome == Acknowledged || w.Outcome == CommitUnknown }) {
		if _, landed := h.commit(res, w.Token); (w.Outcome == Acknowledged || landed) && !slices.Contains(kept, w.Token) {
			what := map[Outcome]string{Acknowledged: "acknowledged", CommitUnknown: "landed"}[w.Outcome]
			out = append(out, fmt.Sprintf("resource %q: %s's %s write at token %d (%q) was lost: a later write overwrote it", res, w.Worker, what, w.Token, w.Value))
		}
	}
	if h.Commits == nil {
		return out
	}
	var committed []fence.Token
	for _, c := range h.Commits {
		if c.Resource == res {
			committed = append(committed, c.Token)
		}
	}
	for _, tok := range kept {
		if !slices.Contains(committed, tok) {
			out = append(out, fmt.Sprintf("resource %q: token %d is kept but in no commit: its write half landed", res, tok))
		}
	}
	if lost := len(committed) - len(kept); lost > 0 {
		out = append(out, fmt.Sprintf("resource %q: %d writes committed, the store keeps %d: %d updates lost", res, len(committed), len(kept), lost))
	}
	return out
}

// landed is every write of res that may have made the final value: the recorded
// ones not refused or rolled back, and the commits no recorded write explains (as
// commit-unknown writes).
func (h *History) landed(res, final string) []WriteRecord {
	out := h.writes(res, func(w WriteRecord) bool {
		return w.Value == final && w.Outcome != RefusedStale && w.Outcome != RefusedLost && w.Outcome != RolledBack
	})
	for _, c := range h.Commits {
		if c.Resource == res && c.Value == final &&
			!slices.ContainsFunc(h.Writes, func(w WriteRecord) bool { return w.Resource == res && w.Token == c.Token }) {
			out = append(out, WriteRecord{Worker: c.Worker, Resource: res, Value: c.Value, Token: c.Token, Outcome: CommitUnknown})
		}
	}
	return out
}
