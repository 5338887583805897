//go:build e2e

package e2e

import (
	"testing"
)

// TestCutOffWorker disconnects the holder of account-42 from the etcd network while
// it works; it can still reach the database. Its session lease runs out in etcd,
// worker 2 takes the lock and writes, and the cut-off worker notices on its own
// (its lock's Done closes, its job's context ends). The write it still attempts
// after its work is refused: by its client before any I/O when it presents the
// lock, by the database when it presents only the token.
func TestCutOffWorker(t *testing.T) {
	tests := []struct {
		grant  string
		reason string // how w1's write is refused
	}{
		{"lock", "lost"},
		{"token", "stale"},
	}
	for _, tt := range tests {
		t.Run("grant="+tt.grant, func(t *testing.T) {
			t.Parallel() // a topology of its own, mostly waiting on faults
			e := NewEnv(t)
			e.Setup("account-42")
			w1 := e.StartWorker("w1", "-accounts", "account-42", "-jobs", "1", "-think", "15s", "-job", "100ms", "-grant", tt.grant)
			t1 := w1.WaitFor("acquired", 1)[0].Token
			w2 := e.StartWorker("w2", "-accounts", "account-42", "-jobs", "1", "-job", "100ms")
			w2.WaitFor("start", 1)
			w1.CutFromEtcd()
			cut := e.lastNote()
			lost := w1.WaitFor("lost", 1)[0]
			c2 := w2.WaitFor("commit", 1)[0]
			ref := w1.WaitFor("refused", 1)[0]
			w1.Reconnect() // lets it close its etcd client cleanly
			w1.Wait()
			w2.Wait()
			t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())

			if lost.Token != t1 || lost.Time.Before(cut) {
				t.Fatalf("worker 1 reported its lock lost %+v; want token %d after the cut at %v", lost, t1, cut)
			}
			if tt.grant == "lock" && lost.Reason != "job context cancelled" {
				t.Fatalf("worker 1 noticed the loss but its job's context was not cancelled: %+v", lost)
			}
			if c2.Token <= t1 {
				t.Fatalf("worker 2's token %d is not above the cut-off holder's %d", c2.Token, t1)
			}
			if ref.Token != t1 || ref.Reason != tt.reason || ref.Time.Before(lost.Time) {
				t.Fatalf("worker 1's write: %+v; want refused as %q after it noticed the loss", ref, tt.reason)
			}
			if tt.reason == "stale" && ref.Seen != c2.Token {
				t.Fatalf("database saw token %d, want worker 2's %d", ref.Seen, c2.Token)
			}
			if c := w1.Find("commit"); len(c) != 0 {
				t.Fatalf("the cut-off worker committed: %+v", c)
			}
			wantRow(t, e, Row{1, []int64{c2.Token}})
			wantClean(t, e, func(r Report) bool { return r.Acked == 1 && r.RefusedDB+r.RefusedCli == 1 })
		})
	}
}
