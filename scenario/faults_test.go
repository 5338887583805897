package scenario_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/scenario"
)

// The faults, each on every backend: the fenced job keeps the guarantee (Run checks
// the history) and each fault shows in the timeline as it should.
var faults = []struct {
	name  string
	steps []*scenario.Step
	check func(t *testing.T, h *scenario.History)
}{
	{"freeze", gcPause(), func(t *testing.T, h *scenario.History) {
		a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
		if b.Outcome != scenario.Acknowledged || a.Outcome == scenario.Acknowledged || a.Token >= b.Token {
			t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's (lower token) refused", a, b)
		}
	}},
	// a is killed inside its open transaction: its write is commit unknown (rolled
	// back), and b takes the lock once a's lease expires.
	{"kill", []*scenario.Step{
		scenario.Start("a"),
		scenario.Kill("a").When("a", "in transaction"),
		scenario.Start("b"),
	}, func(t *testing.T, h *scenario.History) {
		a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
		if a.Outcome != scenario.CommitUnknown || b.Outcome != scenario.Acknowledged || h.Final["invoice-42"] != b.Value {
			t.Fatalf("a's write %+v, b's %+v, final %v: want a's unknown (rolled back) and b's in the store", a, b, h.Final)
		}
	}},
	// a is cut off from etcd at its write until b has written: its lock is lost
	// (its lease expired), so its write is refused.
	{"cutoff", []*scenario.Step{
		scenario.Start("a"),
		scenario.CutOff("a").When("a", scenario.Granted).Until("b", scenario.Finished),
		scenario.Freeze("a").When("a", scenario.AboutToWrite),
		scenario.Start("b"),
	}, func(t *testing.T, h *scenario.History) {
		a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
		if b.Outcome != scenario.Acknowledged || a.Outcome == scenario.Acknowledged {
			t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's refused", a, b)
		}
	}},
	// a's etcd traffic is slower than its lease: it loses the lock while frozen
	// only briefly, and b's write wins.
	{"slow", []*scenario.Step{
		scenario.Start("a"),
		scenario.Slow("a", 3*time.Second).When("a", scenario.Granted),
		scenario.Freeze("a").When("a", scenario.AboutToWrite).Until("b", scenario.Finished),
		scenario.Start("b"),
	}, func(t *testing.T, h *scenario.History) {
		a, b := writeOf(t, h, "a"), writeOf(t, h, "b")
		if b.Outcome != scenario.Acknowledged || a.Outcome == scenario.Acknowledged {
			t.Fatalf("a's write %+v, b's %+v: want b's acknowledged and a's refused", a, b)
		}
		if !strings.Contains(h.Timelines(), "slowed by 3s") {
			t.Fatalf("no slow-down in the timeline:\n%s", h.Timelines())
		}
	}},
}

func TestRun_faults(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, f := range faults {
				t.Run(f.name, func(t *testing.T) {
					t.Parallel() // a run mostly waits out a lease
					h := scenario.Run(t, b.config(false), f.steps...)
					f.check(t, h)
				})
			}
		})
	}
}
