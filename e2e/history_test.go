//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/scenario"
)

// TestFromEvents turns the workers' logs of two read-modify-writes into a history
// the kit's checker judges: with fencing, w1's stale write is refused and the
// history passes; without, both writes of 1 commit, the counter keeps one, and the
// checker names the lost update.
func TestFromEvents(t *testing.T) {
	at := time.Now()
	ev := func(kind, w string, tok, v int64, reason string) Event {
		at = at.Add(time.Millisecond)
		return Event{Time: at, Kind: kind, Worker: w, Account: "a", Token: tok, Value: v, Reason: reason}
	}
	tests := []struct {
		name    string
		events  []Event
		commits []scenario.CommitRecord
		kept    []fence.Token
		final   string
		want    string // a violation; "" for none
	}{
		{"fenced", []Event{
			ev("acquired", "w1", 10, 0, ""), ev("read", "w1", 10, 0, ""), ev("acquired", "w2", 12, 0, ""),
			ev("read", "w2", 12, 0, ""), ev("commit", "w2", 12, 1, ""), ev("refused", "w1", 10, 0, "stale"),
		}, []scenario.CommitRecord{{Worker: "w2", Resource: "a", Token: 12, Value: "1"}}, []fence.Token{12}, "1", ""},
		{"no fence", []Event{
			ev("acquired", "w1", 10, 0, ""), ev("read", "w1", 10, 0, ""), ev("acquired", "w2", 12, 0, ""),
			ev("read", "w2", 12, 0, ""), ev("commit", "w2", 12, 1, ""), ev("commit", "w1", 10, 1, ""),
		}, []scenario.CommitRecord{{Worker: "w2", Resource: "a", Token: 12, Value: "1"}, {Worker: "w1", Resource: "a", Token: 10, Value: "1"}},
			[]fence.Token{10}, "1", "updates lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := fromEvents(tt.events)
			h.Commits, h.Kept, h.Final = tt.commits, map[string][]fence.Token{"a": tt.kept}, map[string]string{"a": tt.final}
			r := report(h)
			t.Log(r.Verdict())
			got := strings.Join(r.Violations, "\n")
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("violations %q; want %q", got, tt.want)
			}
			if len(h.Grants) != 2 || r.Acked+r.RefusedDB != 2 {
				t.Fatalf("grants %d, report %+v: want 2 grants, 2 writes", len(h.Grants), r)
			}
		})
	}
}
