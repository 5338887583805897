package main

import (
	"strings"
	"testing"
)

// The verdict decides the exit status, so it must fail every run that did not show
// what it claims; these cases are the runs that must not pass.
func TestResult_verdict(t *testing.T) {
	s1 := invoice{Account: "account-42", TotalCents: staleTotal, WrittenBy: "Server 1", Token: 33}
	s2 := invoice{Account: "account-42", TotalCents: newTotal, WrittenBy: "Server 2", Token: 34}
	fenced := func() result {
		return result{
			resource: "account-42", s1Token: 33, s2Token: 34, s1Wanted: s1, s2Wanted: s2,
			s1Write: event{Outcome: "refused", Presented: 33, Seen: 34},
			s2Write: event{Outcome: "accepted"},
			expired: true, stored: s2, found: true,
		}
	}
	unfenced := func() result {
		r := fenced()
		r.noFence = true
		r.s1Write = event{Outcome: "accepted"}
		r.stored = s1
		return r
	}
	tests := []struct {
		name string
		r    func() result
		want string // "" for a run that showed what it claims
	}{
		{"fenced: refused, Server 2's row", fenced, ""},
		{"-no-fence: overwritten", unfenced, ""},
		{"fenced: stale write accepted", func() result { r := fenced(); r.s1Write = event{Outcome: "accepted"}; return r }, "not refused"},
		{"fenced: stale write failed otherwise", func() result { r := fenced(); r.s1Write = event{Outcome: "failed", Err: "fence: lock lost"}; return r }, "not refused"},
		{"fenced: refusal names other tokens", func() result { r := fenced(); r.s1Write.Seen = 35; return r }, "refusal named"},
		{"fenced: stored row is Server 1's", func() result { r := fenced(); r.stored = s1; return r }, "not Server 2's"},
		{"fenced: no row", func() result { r := fenced(); r.found, r.stored = false, invoice{}; return r }, "no invoice row"},
		{"tokens did not go up", func() result { r := fenced(); r.s2Token = 33; return r }, "did not go up"},
		{"Server 2 took before the expiry", func() result { r := fenced(); r.expired = false; return r }, "not seen expiring"},
		{"Server 2 refused", func() result { r := fenced(); r.s2Write = event{Outcome: "refused"}; return r }, "write of Server 2"},
		{"-no-fence: stale write refused", func() result { r := unfenced(); r.s1Write = event{Outcome: "refused"}; return r }, "did not land"},
		{"-no-fence: Server 2's row stands", func() result { r := unfenced(); r.stored = s2; return r }, "not Server 1's stale one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r().verdict()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("verdict() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("verdict() = nil, want an error naming %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("verdict() = %q, want it to name %q", err, tt.want)
			}
		})
	}
}
