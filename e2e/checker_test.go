//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// The checker must pass a clean history and catch each kind of violation; a checker
// that cannot fail proves nothing.
func TestCheck(t *testing.T) {
	acq := func(w, a string, tok int64) Event { return Event{Kind: "acquired", Worker: w, Account: a, Token: tok} }
	ack := func(w, a string, tok, v int64) Event {
		return Event{Kind: "commit", Worker: w, Account: a, Token: tok, Value: v}
	}
	led := func(seq int64, w, a string, tok, v int64) LedgerRow {
		return LedgerRow{Seq: seq, Account: a, Token: tok, Worker: w, Balance: v}
	}
	clean := History{
		Events: []Event{
			acq("w1", "a", 10), ack("w1", "a", 10, 1),
			acq("w2", "a", 12), ack("w2", "a", 12, 2),
			acq("w1", "b", 13), ack("w1", "b", 13, 1),
			acq("w2", "a", 15), {Kind: "refused", Reason: "stale", Worker: "w2", Account: "a", Token: 15, Seen: 16},
		},
		Accounts: map[string]Row{"a": {2, []int64{10, 12}}, "b": {1, []int64{13}}},
		Ledger:   []LedgerRow{led(1, "w1", "a", 10, 1), led(2, "w2", "a", 12, 2), led(3, "w1", "b", 13, 1)},
	}
	tests := []struct {
		name   string
		mutate func(h *History)
		want   string // a substring of a violation; empty: no violation
	}{
		{"clean", func(*History) {}, ""},
		{
			"lost update without fencing",
			func(h *History) {
				// w1 read 0 and w2 read 0; both wrote 1; w1's stale write landed last.
				h.Events = []Event{acq("w1", "a", 10), acq("w2", "a", 12), ack("w2", "a", 12, 1), ack("w1", "a", 10, 1)}
				h.Accounts = map[string]Row{"a": {1, []int64{10}}}
				h.Ledger = []LedgerRow{led(1, "w2", "a", 12, 1), led(2, "w1", "a", 10, 1)}
			},
			"updates lost",
		},
		{
			"stale write landed after a newer one",
			func(h *History) {
				h.Events = []Event{acq("w1", "a", 10), acq("w2", "a", 12), ack("w2", "a", 12, 1), ack("w1", "a", 10, 2)}
				h.Accounts = map[string]Row{"a": {2, []int64{12, 10}}}
				h.Ledger = []LedgerRow{led(1, "w2", "a", 12, 1), led(2, "w1", "a", 10, 2)}
			},
			"committed tokens went down",
		},
		{
			"acknowledged write missing",
			func(h *History) { h.Ledger = h.Ledger[1:]; h.Accounts["a"] = Row{1, []int64{12}} },
			"is not in the database",
		},
		{
			"token granted twice",
			func(h *History) { h.Events = append(h.Events, acq("w3", "b", 12)) },
			"granted twice",
		},
		{
			"refused write left a trace",
			func(h *History) {
				h.Ledger = append(h.Ledger, led(4, "w2", "a", 15, 3))
				h.Accounts["a"] = Row{3, []int64{10, 12, 15}}
			},
			"reported refused",
		},
		{
			"unlogged commit without a crash",
			func(h *History) {
				h.Events = h.Events[:len(h.Events)-2] // w2 never logged token 15
				h.Events = append(h.Events, acq("w2", "a", 15))
				h.Ledger = append(h.Ledger, led(4, "w2", "a", 15, 3))
				h.Accounts["a"] = Row{3, []int64{10, 12, 15}}
			},
			"never acknowledged",
		},
		{
			"unlogged commit after a crash",
			func(h *History) {
				h.Events = h.Events[:len(h.Events)-2]
				h.Events = append(h.Events, acq("w2", "a", 15))
				h.Ledger = append(h.Ledger, led(4, "w2", "a", 15, 3))
				h.Accounts["a"] = Row{3, []int64{10, 12, 15}}
				h.Kills = map[string]int{"w2": 1}
			},
			"",
		},
		{
			"commit outcome unknown to the worker",
			func(h *History) {
				h.Events = h.Events[:len(h.Events)-2]
				h.Events = append(h.Events, acq("w2", "a", 15), Event{Kind: "unknown", Worker: "w2", Account: "a", Token: 15, Value: 3})
				h.Ledger = append(h.Ledger, led(4, "w2", "a", 15, 3))
				h.Accounts["a"] = Row{3, []int64{10, 12, 15}}
			},
			"",
		},
		{
			"counter disagrees with the row's writes",
			func(h *History) { h.Accounts["b"] = Row{2, []int64{13}} },
			"writes recorded in the row",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := clone(clean)
			tt.mutate(&h)
			r := Check(h)
			got := strings.Join(r.Violations, "\n")
			switch {
			case tt.want == "" && got != "":
				t.Fatalf("violations in a clean history:\n%s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Fatalf("violations %q do not include %q", got, tt.want)
			}
		})
	}
}

func clone(h History) History {
	c := History{
		Events:   append([]Event(nil), h.Events...),
		Ledger:   append([]LedgerRow(nil), h.Ledger...),
		Accounts: map[string]Row{},
	}
	for k, v := range h.Accounts {
		c.Accounts[k] = Row{v.Balance, append([]int64(nil), v.Tokens...)}
	}
	return c
}
