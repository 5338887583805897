//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"
)

// TestGCPause replays the GC-pause timeline with real processes: worker 1 takes
// account-42 and is frozen (cgroup freezer) past its lease; worker 2 takes the lock
// with a higher token and writes; worker 1 wakes and writes as if nothing happened.
// Worker 1 presents only its token (-grant token), so its client's own loss
// detection is out of the way and only the database can stop it. Every case runs on
// PostgreSQL (pgxfence) and on MariaDB (sqlfence).
func TestGCPause(t *testing.T) {
	tests := []struct {
		name    string
		noFence bool
		freeze  string   // the w1 event after which it is frozen
		w1      []string // w1's timing: where the freeze lands
		check   func(t *testing.T, e *Env, r pauseRun)
	}{
		{
			name: "fenced, frozen before its transaction: stale write refused", freeze: "acquired",
			w1: []string{"-think", "8s", "-job", "100ms"},
			check: func(t *testing.T, e *Env, r pauseRun) {
				ref := r.w1.Find("refused")
				if len(ref) != 1 || ref[0].Reason != "stale" || ref[0].Seen != r.t2 {
					t.Fatalf("worker 1's write: want refused as stale with token %d seen, got %+v", r.t2, ref)
				}
				if c := r.w1.Find("commit"); len(c) != 0 {
					t.Fatalf("worker 1 committed a stale write: %+v", c)
				}
				wantRow(t, e, Row{1, []int64{r.t2}})
				wantClean(t, e, func(rep Report) bool { return rep.RefusedDB == 1 && rep.Acked == 1 })
			},
		},
		{
			name: "fenced, frozen inside its transaction: the new holder waits, nothing lost", freeze: "read",
			w1: []string{"-think", "0s", "-job", "8s"},
			check: func(t *testing.T, e *Env, r pauseRun) {
				// Worker 1 raised the fence with its token before it froze, so its
				// write is ordered before worker 2's, which read its result.
				if !r.waited {
					t.Fatal("worker 2's transaction never waited on worker 1's fence row")
				}
				wantRow(t, e, Row{2, []int64{r.t1, r.t2}})
				wantClean(t, e, func(rep Report) bool { return rep.Acked == 2 })
			},
		},
		{
			name: "no fence, frozen before its transaction: stale write lands", noFence: true, freeze: "acquired",
			w1: []string{"-think", "8s", "-job", "100ms"},
			check: func(t *testing.T, e *Env, r pauseRun) {
				if c := r.w1.Find("commit"); len(c) != 1 {
					t.Fatalf("worker 1's stale write did not land: %+v", r.w1.Events())
				}
				wantRow(t, e, Row{2, []int64{r.t2, r.t1}})
				wantViolation(t, e, "committed tokens went down")
			},
		},
		{
			name: "no fence, frozen inside its transaction: update lost", noFence: true, freeze: "read",
			w1: []string{"-think", "0s", "-job", "8s"},
			check: func(t *testing.T, e *Env, r pauseRun) {
				// Both read 0 and wrote 1: worker 2's acknowledged write is gone.
				wantRow(t, e, Row{1, []int64{r.t1}})
				wantViolation(t, e, "updates lost", "was lost: a later write overwrote it")
			},
		},
	}
	for _, db := range []Database{Postgres, MariaDB} {
		for _, tt := range tests {
			t.Run(db.String()+"/"+tt.name, func(t *testing.T) {
				t.Parallel() // a topology of its own, mostly waiting on faults
				gcPause(t, db, tt.noFence, tt.freeze, tt.w1, tt.check)
			})
		}
	}
}

// gcPause runs one case of TestGCPause on db.
func gcPause(t *testing.T, db Database, noFence bool, freeze string, w1 []string, check func(*testing.T, *Env, pauseRun)) {
	e := NewEnvWith(t, db)
	e.Setup("account-42")
	common := []string{"-accounts", "account-42", "-jobs", "1"}
	if noFence {
		common = append(common, "-no-fence")
	}
	var r pauseRun
	r.w1 = e.StartWorker("w1", slices.Concat(common, []string{"-grant", "token"}, w1)...)
	r.t1 = r.w1.WaitFor(freeze, 1)[0].Token
	r.w1.Pause()
	r.w2 = e.StartWorker("w2", slices.Concat(common, []string{"-think", "0s", "-job", "100ms"})...)
	r.t2 = r.w2.WaitFor("acquired", 1)[0].Token
	if r.t2 <= r.t1 {
		t.Fatalf("worker 2's token %d is not above worker 1's %d", r.t2, r.t1)
	}
	if freeze == "read" && !noFence {
		e.Eventually("worker 2 to wait on the fence row", func() bool {
			n, err := e.lockWaits(t.Context())
			return err == nil && n > 0
		})
		r.waited = true
		e.Note("w2's fenced transaction waits on w1's fence row")
	} else {
		r.w2.WaitFor("commit", 1)
	}
	r.w1.Unpause()
	r.w1.Wait()
	r.w2.Wait()
	t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())
	check(t, e, r)
}

type pauseRun struct {
	w1, w2 *Worker
	t1, t2 int64 // their tokens
	waited bool
}

// wantRow checks account-42's stored row.
func wantRow(t *testing.T, e *Env, want Row) {
	t.Helper()
	got, err := e.account(t.Context(), "account-42")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stored row: account-42 balance %d, written by tokens %v", got.Balance, got.Tokens)
	if got.Balance != want.Balance || !slices.Equal(got.Tokens, want.Tokens) {
		t.Fatalf("stored row = %+v, want %+v", got, want)
	}
}

// wantClean runs the history checker and wants no violation and counts that ok
// accepts.
func wantClean(t *testing.T, e *Env, ok func(Report) bool) {
	t.Helper()
	rep := e.CheckHistory()
	t.Log(rep.Verdict())
	if len(rep.Violations) > 0 || !ok(rep) {
		t.Fatalf("history check failed or unexpected counts")
	}
}

// wantViolation runs the history checker on a run that broke the guarantees and
// wants it to report each of wants.
func wantViolation(t *testing.T, e *Env, wants ...string) {
	t.Helper()
	rep := e.CheckHistory()
	t.Log(rep.Verdict())
	all := strings.Join(rep.Violations, "\n")
	for _, want := range wants {
		if !strings.Contains(all, want) {
			t.Errorf("the checker did not report %q", want)
		}
	}
}
