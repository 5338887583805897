package scenario_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/scenario"
)

func ack(worker string, tok int64, value string, begin, end int) scenario.WriteRecord {
	return scenario.WriteRecord{Worker: worker, Resource: "r", Token: fence.Token(tok), Value: value, Outcome: scenario.Acknowledged, Begin: begin, End: end}
}

// permit is worker's grant of a permit of "exports" (n permits), with the number of
// slots etcd held at its token.
func permit(worker, slot string, tok int64, n, holders int) scenario.GrantRecord {
	return scenario.GrantRecord{Worker: worker, Resource: slot, Token: fence.Token(tok), Permit: "exports", Permits: n, Holders: holders}
}

func withOutcome(w scenario.WriteRecord, o scenario.Outcome) scenario.WriteRecord {
	w.Outcome = o
	return w
}

// TestHistory_Check holds each rule of the verdict to histories made by hand.
func TestHistory_Check(t *testing.T) {
	tests := []struct {
		name   string
		h      scenario.History
		broken string // "" when the history keeps every rule
	}{
		{"fenced", scenario.History{
			Writes: []scenario.WriteRecord{ack("b", 4, "b", 3, 4), withOutcome(ack("a", 2, "a", 5, 6), scenario.RefusedStale)},
			Final:  map[string]string{"r": "b"}}, ""},
		{"concurrent writes in token order", scenario.History{
			Writes: []scenario.WriteRecord{ack("a", 2, "a", 1, 4), ack("b", 4, "b", 2, 3)},
			Final:  map[string]string{"r": "b"}}, ""},
		{"lower token after higher", scenario.History{
			Writes: []scenario.WriteRecord{ack("b", 4, "b", 1, 2), ack("a", 2, "a", 3, 4)},
			Final:  map[string]string{"r": "b"}}, `a's write at token 2 ("a") landed after b's write at token 4 ("b") was acknowledged`},
		{"acknowledged write lost", scenario.History{
			Writes: []scenario.WriteRecord{ack("a", 2, "a", 1, 2), ack("b", 4, "b", 3, 4)},
			Final:  map[string]string{"r": "a"}}, `b's acknowledged write at token 4 ("b") is lost: the final value "a" is a's write at the lower token 2`},
		{"no final value", scenario.History{
			Writes: []scenario.WriteRecord{ack("a", 2, "a", 1, 2)},
			Final:  map[string]string{}}, "Read returned no value for the resource"},
		{"unrecorded final value", scenario.History{
			Writes: []scenario.WriteRecord{ack("a", 2, "a", 1, 2)},
			Final:  map[string]string{"r": "zz"}}, `the final value "zz" is no recorded write's`},
		{"refused write landed", scenario.History{
			Writes: []scenario.WriteRecord{withOutcome(ack("a", 2, "a", 1, 2), scenario.RefusedLost)},
			Final:  map[string]string{"r": "a"}}, "whose write was refused lost"},
		{"commit unknown landed", scenario.History{
			Writes: []scenario.WriteRecord{ack("a", 2, "a", 1, 2), withOutcome(ack("b", 4, "b", 3, 4), scenario.CommitUnknown)},
			Final:  map[string]string{"r": "b"}}, ""},
		{"commit unknown lost", scenario.History{
			Writes: []scenario.WriteRecord{ack("a", 2, "a", 1, 2), withOutcome(ack("b", 4, "b", 3, 4), scenario.CommitUnknown)},
			Final:  map[string]string{"r": "a"}}, ""},
		{"token granted twice", scenario.History{
			Grants: []scenario.GrantRecord{{Worker: "a", Resource: "r", Token: 3}, {Worker: "b", Resource: "r", Token: 3}}},
			`resource "r": token 3 granted to 2 holders: a, b`},
		{"permits within n", scenario.History{Grants: []scenario.GrantRecord{
			permit("a", "exports/0000", 5, 3, 1), permit("b", "exports/0001", 6, 3, 2), permit("c", "exports/0002", 7, 3, 3)}}, ""},
		{"permits over n", scenario.History{Grants: []scenario.GrantRecord{
			permit("a", "exports/0000", 5, 3, 3), permit("e", "exports/0003", 9, 3, 4)}},
			`semaphore "exports": 4 permits held at token 9 (e's grant of "exports/0003"), over its 3`},
		{"n lowered: the largest n in use counts", scenario.History{Grants: []scenario.GrantRecord{
			permit("a", "exports/0004", 5, 5, 5), permit("b", "exports/0000", 9, 3, 5)}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.h.Check()
			switch {
			case tt.broken == "" && err != nil:
				t.Fatalf("Check() = %v; want nil", err)
			case tt.broken != "" && (!errors.Is(err, scenario.ErrViolation) || !strings.Contains(err.Error(), tt.broken)):
				t.Fatalf("Check() = %v; want a violation saying %q", err, tt.broken)
			}
		})
	}
}
