//go:build e2e

package e2e

import (
	"maps"
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
	unk := func(w, a string, tok, v int64) Event {
		return Event{Kind: "unknown", Worker: w, Account: a, Token: tok, Value: v}
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
			"commit outcome unknown, not landed",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "a", 17), unk("w1", "a", 17, 3))
			},
			"",
		},
		{
			"commit outcome unknown, landed, and a later write counted it",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "a", 17), unk("w1", "a", 17, 3), acq("w2", "a", 18), ack("w2", "a", 18, 4))
				h.Ledger = append(h.Ledger, led(4, "w1", "a", 17, 3), led(5, "w2", "a", 18, 4))
				h.Accounts["a"] = Row{4, []int64{10, 12, 17, 18}}
			},
			"",
		},
		{
			"two unknown outcomes, one landed",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), unk("w1", "b", 17, 2), acq("w2", "b", 18), unk("w2", "b", 18, 2))
				h.Ledger = append(h.Ledger, led(4, "w2", "b", 18, 2))
				h.Accounts["b"] = Row{2, []int64{13, 18}}
			},
			"",
		},
		{
			"acknowledged write overwritten by a landed unknown one",
			func(h *History) {
				// w1's unknown write read the balance before w2's acknowledged one.
				h.Events = append(h.Events, acq("w1", "a", 17), unk("w1", "a", 17, 2))
				h.Ledger = append(h.Ledger, led(4, "w1", "a", 17, 2))
				h.Accounts["a"] = Row{2, []int64{10, 17}}
			},
			"acknowledged write by w2 (token 12, value 2) was lost",
		},
		{
			"landed unknown write overwritten",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "a", 17), unk("w1", "a", 17, 3), acq("w2", "a", 18), ack("w2", "a", 18, 3))
				h.Ledger = append(h.Ledger, led(4, "w1", "a", 17, 3), led(5, "w2", "a", 18, 3))
				h.Accounts["a"] = Row{3, []int64{10, 12, 18}}
			},
			"landed write by w1 (token 17, value 3) was lost",
		},
		{
			"stale unknown write landed after a newer one",
			func(h *History) {
				h.Events = append(h.Events, acq("w3", "a", 11), unk("w3", "a", 11, 3))
				h.Ledger = append(h.Ledger, led(4, "w3", "a", 11, 3))
				h.Accounts["a"] = Row{3, []int64{10, 12, 11}}
			},
			"committed tokens went down",
		},
		{
			"landed unknown write missing from the row",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), unk("w1", "b", 17, 2))
				h.Ledger = append(h.Ledger, led(4, "w1", "b", 17, 2))
			},
			"landed write by w1 (token 17, value 2) was lost",
		},
		{
			"unknown write counted in the row but not in the ledger",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), unk("w1", "b", 17, 2))
				h.Accounts["b"] = Row{2, []int64{13, 17}}
			},
			"half landed",
		},
		{
			"unknown write landed with another value than it wrote",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), unk("w1", "b", 17, 5))
				h.Ledger = append(h.Ledger, led(4, "w1", "b", 17, 2))
				h.Accounts["b"] = Row{2, []int64{13, 17}}
			},
			"but w1 wrote value 5",
		},
		{
			"write reported failed and rolled back landed",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), Event{Kind: "aborted", Worker: "w1", Account: "b", Token: 17, Value: 2, Reason: "after its writes"})
				h.Ledger = append(h.Ledger, led(4, "w1", "b", 17, 2))
				h.Accounts["b"] = Row{2, []int64{13, 17}}
			},
			"reported failed and rolled back",
		},
		{
			"write reported failed and rolled back did not land",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), Event{Kind: "aborted", Worker: "w1", Account: "b", Token: 17, Value: 2, Reason: "after its writes"})
			},
			"",
		},
		{
			"counter above the acknowledged and landed writes",
			func(h *History) {
				h.Events = append(h.Events, acq("w1", "b", 17), unk("w1", "b", 17, 2))
				h.Accounts["b"] = Row{2, []int64{13, 14}}
				h.Ledger = append(h.Ledger, led(4, "w9", "b", 14, 2))
			},
			"never acknowledged",
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
			t.Log(r.Verdict())
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
		Kills:    map[string]int{},
	}
	maps.Copy(c.Kills, h.Kills)
	for k, v := range h.Accounts {
		c.Accounts[k] = Row{v.Balance, append([]int64(nil), v.Tokens...)}
	}
	return c
}

// The checker reads back which writes of unknown outcome landed and counts them.
func TestCheck_unknownFates(t *testing.T) {
	evs := []Event{
		{Kind: "acquired", Worker: "w1", Account: "a", Token: 5}, {Kind: "unknown", Worker: "w1", Account: "a", Token: 5, Value: 1},
		{Kind: "acquired", Worker: "w2", Account: "a", Token: 7}, {Kind: "commit", Worker: "w2", Account: "a", Token: 7, Value: 2},
		{Kind: "acquired", Worker: "w1", Account: "a", Token: 9}, {Kind: "unknown", Worker: "w1", Account: "a", Token: 9, Value: 3},
	}
	tests := []struct {
		name           string
		landed         []int64 // tokens the database holds, in commit order
		acked, unacked int
		wantLanded     int
	}{
		{"first landed, last not", []int64{5, 7}, 1, 1, 1},
		{"both landed", []int64{5, 7, 9}, 1, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := History{Events: evs, Accounts: map[string]Row{"a": {int64(len(tt.landed)), tt.landed}}}
			for i, tok := range tt.landed {
				w := "w1"
				if tok == 7 {
					w = "w2"
				}
				h.Ledger = append(h.Ledger, LedgerRow{Seq: int64(i + 1), Account: "a", Token: tok, Worker: w, Balance: int64(i + 1)})
			}
			r := Check(h)
			t.Log(r.Verdict())
			if len(r.Violations) > 0 || r.Unknown != 2 || r.UnknownLanded != tt.wantLanded || r.Acked != tt.acked || r.Unlogged != tt.unacked {
				t.Fatalf("report %+v; want 2 unknown, %d landed, %d acknowledged, no violation", r, tt.wantLanded, tt.acked)
			}
		})
	}
}
