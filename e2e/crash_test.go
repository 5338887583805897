//go:build e2e

package e2e

import (
	"testing"
)

// TestCrash kills the holder of account-42 with SIGKILL while worker 2 waits for the
// lock: the crashed holder's session lease runs out, worker 2 takes the lock with a
// higher token and writes. Killed inside its transaction, the holder's connection
// drops and PostgreSQL rolls its writes back.
func TestCrash(t *testing.T) {
	tests := []struct {
		name   string
		killAt string   // the w1 event after which it is killed
		w1     []string // w1's timing: where the kill lands
	}{
		{"killed holding the lock", "acquired", []string{"-think", "60s"}},
		{"killed inside its transaction", "read", []string{"-job", "60s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // a topology of its own, mostly waiting on faults
			e := NewEnv(t)
			e.Setup("account-42")
			w1 := e.StartWorker("w1", append([]string{"-accounts", "account-42", "-jobs", "1"}, tt.w1...)...)
			t1 := w1.WaitFor(tt.killAt, 1)[0].Token
			w2 := e.StartWorker("w2", "-accounts", "account-42", "-jobs", "1", "-job", "100ms")
			w2.WaitFor("start", 1)
			w1.Kill()
			killed := e.lastNote()
			a2 := w2.WaitFor("acquired", 1)[0]
			c2 := w2.WaitFor("commit", 1)[0]
			w2.Wait()
			t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())
			t.Logf("lock passed on %.2fs after the kill (lease %v)", a2.Time.Sub(killed).Seconds(), Lease)

			if a2.Token <= t1 {
				t.Fatalf("worker 2's token %d is not above the crashed holder's %d", a2.Token, t1)
			}
			if a2.Time.Before(killed) {
				t.Fatalf("worker 2 took the lock at %v, before the holder was killed at %v", a2.Time, killed)
			}
			if c2.Token != a2.Token || c2.Value != 1 {
				t.Fatalf("worker 2's write = %+v, want value 1 with token %d", c2, a2.Token)
			}
			wantRow(t, e, Row{1, []int64{a2.Token}})
			wantClean(t, e, func(r Report) bool { return r.Acked == 1 && r.Committed == 1 })
		})
	}
}
