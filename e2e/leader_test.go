//go:build e2e

package e2e

import (
	"fmt"
	"testing"
)

// TestEtcdLeaderLost kills the etcd leader's container under load: three workers
// keep doing jobs on two accounts. After the election jobs continue; tokens are
// never reused (etcd revisions survive the leader change); the killed member,
// started again, rejoins and catches up.
func TestEtcdLeaderLost(t *testing.T) {
	e := NewEnv(t)
	e.Setup("2")
	var ws []*Worker
	for i := 1; i <= 3; i++ {
		ws = append(ws, e.StartWorker(fmt.Sprintf("w%d", i), "-accounts", "2", "-think", "0s..100ms", "-job", "50ms..150ms", "-seed", fmt.Sprint(i)))
	}
	commits := func() (n int, maxToken int64) {
		for _, w := range ws {
			for _, ev := range w.Find("commit") {
				n++
				maxToken = max(maxToken, ev.Token)
			}
		}
		return n, maxToken
	}
	e.Eventually("jobs to run on every worker", func() bool {
		for _, w := range ws {
			if len(w.Find("commit")) < 3 {
				return false
			}
		}
		return true
	})

	leader, err := e.Leader()
	if err != nil {
		t.Fatal(err)
	}
	before, maxBefore := commits()
	leader.Kill()
	e.Eventually("a new leader", func() bool {
		l, err := e.Leader()
		return err == nil && l != leader
	})
	newLeader, _ := e.Leader()
	e.Note("%s is the new leader", newLeader.Name)
	e.Eventually("jobs to continue after the election", func() bool {
		n, _ := commits()
		return n >= before+15
	})
	during, _ := commits()

	leader.Restart()
	st, err := newLeader.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e.Eventually(leader.Name+" to rejoin and catch up", func() bool { return leader.Rejoined(t.Context(), st.RaftAppliedIndex) })
	e.Note("%s rejoined (applied index >= %d)", leader.Name, st.RaftAppliedIndex)
	e.Eventually("jobs to continue with the member back", func() bool {
		n, _ := commits()
		return n >= during+15
	})
	for _, w := range ws {
		w.Stop()
	}
	after, maxAfter := commits()
	t.Logf("acknowledged writes: %d before the kill, %d by the election's end, %d in all; highest token %d before, %d after",
		before, during, after, maxBefore, maxAfter)
	if maxAfter <= maxBefore {
		t.Fatalf("no token above %d was used after the leader change", maxBefore)
	}
	rep := e.CheckHistory()
	t.Log(rep.Verdict())
	if len(rep.Violations) > 0 {
		t.Fatal("history check failed")
	}
}
