package scenario_test

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/scenario"
)

// counterRun is a history of read-modify-writes of counters a and b, with the
// store's account read back: each write's value is the counter it wrote, the store
// keeps the token of every write its counter counts, and a ledger row per commit.
type counterRun struct{ h scenario.History }

func newCounterRun() *counterRun {
	return &counterRun{scenario.History{Final: map[string]string{}, Commits: []scenario.CommitRecord{},
		Kept: map[string][]fence.Token{}, Crashes: map[string]int{}}}
}

// write records worker's write of value at tok, after its grant.
func (r *counterRun) write(worker, res string, tok, value int64, o scenario.Outcome) *counterRun {
	n := len(r.h.Writes) * 2
	r.h.Grants = append(r.h.Grants, scenario.GrantRecord{Worker: worker, Resource: res, Token: fence.Token(tok), Seq: n})
	r.h.Writes = append(r.h.Writes, scenario.WriteRecord{Worker: worker, Resource: res, Token: fence.Token(tok),
		Value: strconv.FormatInt(value, 10), Outcome: o, Begin: n, End: n + 1})
	return r
}

// commit is a ledger row: worker's write of value at tok is in the store.
func (r *counterRun) commit(worker, res string, tok, value int64) *counterRun {
	r.h.Commits = append(r.h.Commits, scenario.CommitRecord{Worker: worker, Resource: res, Token: fence.Token(tok), Value: strconv.FormatInt(value, 10)})
	return r
}

// row is a counter's final state: its value and the tokens of the writes it counts.
func (r *counterRun) row(res string, value int64, toks ...int64) *counterRun {
	r.h.Final[res] = strconv.FormatInt(value, 10)
	r.h.Kept[res] = nil
	for _, t := range toks {
		r.h.Kept[res] = append(r.h.Kept[res], fence.Token(t))
	}
	return r
}

// clean: w1 and w2 increment a, w1 increments b, and w2's stale write is refused.
func clean() *counterRun {
	const ack = scenario.Acknowledged
	return newCounterRun().
		write("w1", "a", 10, 1, ack).commit("w1", "a", 10, 1).
		write("w2", "a", 12, 2, ack).commit("w2", "a", 12, 2).
		write("w1", "b", 13, 1, ack).commit("w1", "b", 13, 1).
		write("w2", "a", 15, 3, scenario.RefusedStale).
		row("a", 2, 10, 12).row("b", 1, 13)
}

// TestHistory_Check_commits holds each rule of the store's account to histories
// made by hand: a clean one passes, and each kind of violation is named.
func TestHistory_Check_commits(t *testing.T) {
	const ack, unk = scenario.Acknowledged, scenario.CommitUnknown
	tests := []struct {
		name   string
		run    func() *counterRun
		broken string // "" when the history keeps every rule
	}{
		{"clean", clean, ""},
		{"lost update without fencing", func() *counterRun {
			// w1 and w2 both read 0 and wrote 1; w1's stale write landed last.
			return newCounterRun().write("w2", "a", 12, 1, ack).write("w1", "a", 10, 1, ack).
				commit("w2", "a", 12, 1).commit("w1", "a", 10, 1).row("a", 1, 10)
		}, `resource "a": 2 writes committed, the store keeps 1: 1 updates lost`},
		{"stale write landed after a newer one", func() *counterRun {
			return newCounterRun().write("w2", "a", 12, 1, ack).write("w1", "a", 10, 2, ack).
				commit("w2", "a", 12, 1).commit("w1", "a", 10, 2).row("a", 2, 12, 10)
		}, "committed tokens went down: 10 (w1) after 12 (w2)"},
		{"acknowledged write missing", func() *counterRun {
			r := clean()
			r.h.Commits = r.h.Commits[1:]
			return r.row("a", 1, 12)
		}, `w1's acknowledged write at token 10 ("1") is not in the store's commits`},
		{"token committed twice", func() *counterRun { return clean().commit("w1", "b", 13, 1) }, "token 13 committed twice"},
		{"refused write left a trace", func() *counterRun { return clean().commit("w2", "a", 15, 3).row("a", 3, 10, 12, 15) },
			`w2's write at token 15 ("3") was refused stale but is in the store's commits`},
		{"rolled-back write landed", func() *counterRun {
			return clean().write("w1", "b", 17, 2, scenario.RolledBack).commit("w1", "b", 17, 2).row("b", 2, 13, 17)
		}, "was rolled back but is in the store's commits"},
		{"rolled-back write did not land", func() *counterRun { return clean().write("w1", "b", 17, 2, scenario.RolledBack) }, ""},
		{"unrecorded commit without a crash", func() *counterRun { return clean().commit("w3", "a", 16, 3).row("a", 3, 10, 12, 16) },
			"worker w3: 1 commits with no recorded write, but it crashed 0 times"},
		{"unrecorded commit after a crash", func() *counterRun {
			r := clean().commit("w3", "a", 16, 3).row("a", 3, 10, 12, 16)
			r.h.Crashes["w3"] = 1
			return r
		}, ""},
		{"commit unknown, landed", func() *counterRun {
			return clean().write("w1", "a", 17, 3, unk).commit("w1", "a", 17, 3).row("a", 3, 10, 12, 17)
		}, ""},
		{"commit unknown, not landed", func() *counterRun { return clean().write("w1", "a", 17, 3, unk) }, ""},
		{"commit unknown, landed, and a later write counted it", func() *counterRun {
			return clean().write("w1", "a", 17, 3, unk).write("w2", "a", 18, 4, ack).
				commit("w1", "a", 17, 3).commit("w2", "a", 18, 4).row("a", 4, 10, 12, 17, 18)
		}, ""},
		{"two unknown outcomes, one landed", func() *counterRun {
			return clean().write("w1", "b", 17, 2, unk).write("w2", "b", 18, 2, unk).commit("w2", "b", 18, 2).row("b", 2, 13, 18)
		}, ""},
		{"acknowledged write overwritten by a landed unknown one", func() *counterRun {
			// w1's unknown write read the counter before w2's acknowledged one.
			return clean().write("w1", "a", 17, 2, unk).commit("w1", "a", 17, 2).row("a", 2, 10, 17)
		}, `w2's acknowledged write at token 12 ("2") was lost: a later write overwrote it`},
		{"landed unknown write overwritten", func() *counterRun {
			return clean().write("w1", "a", 17, 3, unk).write("w2", "a", 18, 3, ack).
				commit("w1", "a", 17, 3).commit("w2", "a", 18, 3).row("a", 3, 10, 12, 18)
		}, `w1's landed write at token 17 ("3") was lost: a later write overwrote it`},
		{"stale unknown write landed after a newer one", func() *counterRun {
			return clean().write("w3", "a", 11, 3, unk).commit("w3", "a", 11, 3).row("a", 3, 10, 12, 11)
		}, "committed tokens went down: 11 (w3) after 12 (w2)"},
		{"landed unknown write missing from the row", func() *counterRun {
			return clean().write("w1", "b", 17, 2, unk).commit("w1", "b", 17, 2)
		}, `w1's landed write at token 17 ("2") was lost`},
		{"unknown write kept but not committed", func() *counterRun { return clean().write("w1", "b", 17, 2, unk).row("b", 2, 13, 17) },
			"token 17 is kept but in no commit: its write half landed"},
		{"unknown write landed with another value than it wrote", func() *counterRun {
			return clean().write("w1", "b", 17, 5, unk).commit("w1", "b", 17, 2).row("b", 2, 13, 17)
		}, `w1's write at token 17, outcome unknown, wrote "5" but landed as w1's "2"`},
		{"counter above the acknowledged and landed writes", func() *counterRun {
			return clean().write("w1", "b", 17, 2, unk).commit("w9", "b", 14, 2).row("b", 2, 13, 14)
		}, "worker w9: 1 commits with no recorded write"},
		{"counter disagrees with the writes it keeps", func() *counterRun { return clean().row("b", 2, 13) },
			`w1's acknowledged write at token 13 ("1") is lost: the final value "2" is no recorded write's`},
		{"kept tokens go down", func() *counterRun { return clean().row("a", 2, 12, 10) }, "kept tokens went down: [12 10]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.run().h
			err := h.Check()
			switch {
			case tt.broken == "" && err != nil:
				t.Fatalf("Check() = %v; want nil", err)
			case tt.broken != "" && (!errors.Is(err, scenario.ErrViolation) || !strings.Contains(err.Error(), tt.broken)):
				t.Fatalf("Check() = %v; want a violation saying %q", err, tt.broken)
			}
		})
	}
}

// TestHistory_Counts reads back which writes of unknown outcome landed and counts
// them, and the commits no write explains.
func TestHistory_Counts(t *testing.T) {
	const ack, unk = scenario.Acknowledged, scenario.CommitUnknown
	tests := []struct {
		name string
		run  *counterRun
		want scenario.Counts
	}{
		{"first landed, last not", newCounterRun().write("w1", "a", 5, 1, unk).write("w2", "a", 7, 2, ack).write("w1", "a", 9, 3, unk).
			commit("w1", "a", 5, 1).commit("w2", "a", 7, 2).row("a", 2, 5, 7),
			scenario.Counts{Grants: 3, Outcomes: map[scenario.Outcome]int{ack: 1, unk: 2}, Committed: 2, Landed: 1}},
		{"both landed, and one unrecorded", newCounterRun().write("w1", "a", 5, 1, unk).write("w2", "a", 7, 2, ack).write("w1", "a", 9, 3, unk).
			commit("w1", "a", 5, 1).commit("w2", "a", 7, 2).commit("w1", "a", 9, 3).commit("w3", "a", 11, 4).row("a", 4, 5, 7, 9, 11),
			scenario.Counts{Grants: 3, Outcomes: map[scenario.Outcome]int{ack: 1, unk: 2}, Committed: 4, Landed: 2, Unrecorded: 1}},
		{"clean", clean(), scenario.Counts{Grants: 4, Outcomes: map[scenario.Outcome]int{ack: 3, scenario.RefusedStale: 1}, Committed: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.run.h.Counts()
			if got.Grants != tt.want.Grants || !maps.Equal(got.Outcomes, tt.want.Outcomes) || got.Committed != tt.want.Committed ||
				got.Landed != tt.want.Landed || got.Unrecorded != tt.want.Unrecorded {
				t.Fatalf("Counts() = %v; want %v", got, tt.want)
			}
			if !strings.Contains(got.String(), "committed "+strconv.Itoa(tt.want.Committed)) {
				t.Fatalf("String() = %q", got.String())
			}
		})
	}
}

// A history without the store's account is judged as before: its commit rules
// are skipped, not failed.
func TestHistory_Check_noCommits(t *testing.T) {
	h := clean().h
	h.Commits, h.Kept, h.Crashes = nil, nil, nil
	if err := h.Check(); err != nil {
		t.Fatalf("Check() = %v; want nil", err)
	}
}
