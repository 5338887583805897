//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// commitDelay is the window the COMMIT scenarios' worker leaves between its last
// write and COMMIT: time enough to freeze the database before COMMIT is sent.
const commitDelay = 2 * time.Second

// TestDatabaseFaults fails the database itself, one fault at a time, on PostgreSQL
// (pgxfence) and on MariaDB (sqlfence): the server killed and restarted from its
// data, under load, inside a fenced transaction and inside COMMIT; the reply to a
// COMMIT lost; the network to it cut past a lease; the server frozen past a lease.
// After each, the workers' pools recover on their own and the history checker holds
// the database to what the workers logged: nothing acknowledged lost, nothing
// refused or rolled back landed, a commit of unknown outcome either landed whole or
// not at all.
func TestDatabaseFaults(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *Env)
	}{
		{"killed under load, restarted from its data", dbKilledUnderLoad},
		{"killed inside a fenced transaction", dbKilledInTransaction},
		{"killed inside COMMIT: unknown, not landed", dbKilledInCommit},
		{"reply to COMMIT lost: unknown, landed", dbCommitReplyLost},
		{"network cut past a lease", dbCutOff},
		{"frozen past a lease", dbFrozen},
	}
	for _, db := range []Database{Postgres, MariaDB} {
		for _, tt := range tests {
			t.Run(db.String()+"/"+tt.name, func(t *testing.T) {
				t.Parallel() // a topology of its own, mostly waiting on faults
				e := NewEnvWith(t, db)
				tt.run(t, e)
			})
		}
	}
}

// loadWorkers starts three workers on two accounts whose transactions give up after
// -timeout, and waits until each has committed.
func loadWorkers(e *Env) []*Worker {
	e.Setup("2")
	var ws []*Worker
	for i := 1; i <= 3; i++ {
		ws = append(ws, e.StartWorker(fmt.Sprintf("w%d", i), "-accounts", "2", "-think", "0s..100ms",
			"-job", "50ms..150ms", "-timeout", "8s", "-seed", fmt.Sprint(i)))
	}
	for _, w := range ws {
		w.WaitFor("commit", 2)
	}
	return ws
}

// recovers waits until every worker has committed twice more than it had when the
// fault ended: its pool reconnected with no action by the program.
func recovers(e *Env, ws []*Worker) {
	e.t.Helper()
	for _, w := range ws {
		w.WaitFor("commit", len(w.Find("commit"))+2)
	}
	e.Note("every worker commits again")
	for _, w := range ws {
		w.Stop()
	}
}

// wantHistory runs the history checker, logs the timeline on failure, and wants no
// violation and counts that ok accepts.
func wantHistory(t *testing.T, e *Env, ok func(Report) bool) Report {
	t.Helper()
	rep := e.CheckHistory()
	t.Log(rep.Verdict())
	if len(rep.Violations) > 0 || !ok(rep) {
		t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())
		t.Fatal("history check failed or unexpected counts")
	}
	return rep
}

func dbKilledUnderLoad(t *testing.T, e *Env) {
	ws := loadWorkers(e)
	e.KillDatabase()
	e.Sleep(time.Second)
	e.RestartDatabase()
	recovers(e, ws)
	wantHistory(t, e, func(r Report) bool { return r.Acked >= 12 })
}

// oneWorker starts the single worker of the scenarios that aim a fault at one
// transaction, on account-42, doing jobs until stopped.
func oneWorker(e *Env, args ...string) *Worker {
	e.Setup("account-42")
	return e.StartWorker("w1", append([]string{"-accounts", "account-42", "-think", "0s"}, args...)...)
}

// outcome waits for the worker's outcome of the write with token and returns it.
func outcome(e *Env, w *Worker, token int64) Event {
	e.t.Helper()
	var out Event
	e.Eventually(fmt.Sprintf("%s's outcome for token %d", w.ID, token), func() bool {
		for _, ev := range w.Events() {
			if ev.Token == token && slices.Contains([]string{"commit", "refused", "aborted", "unknown"}, ev.Kind) {
				out = ev
				return true
			}
		}
		return false
	})
	return out
}

// commitsAfter waits for the worker to commit with a token above token and stops
// it.
func commitsAfter(e *Env, w *Worker, token int64) Event {
	e.t.Helper()
	var c Event
	e.Eventually(fmt.Sprintf("%s to commit after token %d", w.ID, token), func() bool {
		for _, ev := range w.Find("commit") {
			if ev.Token > token {
				c = ev
				return true
			}
		}
		return false
	})
	w.Stop()
	return c
}

func dbKilledInTransaction(t *testing.T, e *Env) {
	// The job sits in its transaction for longer than the lease; the server's idle
	// bound (the lock's lease by default) would end it before the kill lands.
	w := oneWorker(e, "-job", "3s", "-timeout", "15s", "-idle-timeout", "30s")
	t1 := w.WaitFor("read", 1)[0].Token
	e.KillDatabase()
	e.RestartDatabase()
	o := outcome(e, w, t1)
	c := commitsAfter(e, w, t1)
	t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())
	if o.Kind != "aborted" {
		t.Fatalf("the write inside the killed transaction: %s (%s), want aborted", o.Kind, o.Err)
	}
	wantRow(t, e, Row{1, []int64{c.Token}})
	wantHistory(t, e, func(r Report) bool { return r.Acked == 1 && r.Unknown == 0 })
}

// commitSent freezes the database once the worker has made its writes, and waits
// until its COMMIT has been sent to the frozen server: the kernel accepts it, the
// server does not read it. A freeze that lands too late to be sure COMMIT was not
// sent yet is undone, and the worker's next job is tried.
func commitSent(e *Env, w *Worker) int64 {
	e.t.Helper()
	for n := 1; ; n++ {
		if n > 10 {
			e.t.Fatalf("could not freeze the database before %s's COMMIT in 10 jobs", w.ID)
		}
		wrote := w.WaitFor("wrote", n)[n-1]
		e.FreezeDatabase()
		if late := time.Since(wrote.Time); late > commitDelay/2 {
			e.ThawDatabase()
			e.Note("froze %v after %s's writes: too late, trying its next job", late.Round(time.Millisecond), w.ID)
			continue
		}
		e.Sleep(time.Until(wrote.Time.Add(commitDelay + time.Second)))
		e.Note("%s has sent COMMIT for token %d to the frozen server", w.ID, wrote.Token)
		return wrote.Token
	}
}

func dbKilledInCommit(t *testing.T, e *Env) {
	// The freeze holds the transaction open past the lease: the idle bound is lifted
	// so that only the kill decides its fate.
	w := oneWorker(e, "-job", "0s", "-commit-delay", commitDelay.String(), "-timeout", "15s", "-idle-timeout", "30s")
	t1 := commitSent(e, w)
	e.KillDatabase()
	e.RestartDatabase()
	o := outcome(e, w, t1)
	c := commitsAfter(e, w, t1)
	t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())
	wantFate(t, e, t1, false, c.Token)
	if o.Kind != "unknown" {
		t.Fatalf("the write whose COMMIT the killed server never read: %s (%s), want unknown (fence.ErrCommitUnknown)", o.Kind, o.Err)
	}
	wantHistory(t, e, func(r Report) bool { return r.Acked >= 1 && r.Unknown == 1 && r.UnknownLanded == 0 })
}

func dbCommitReplyLost(t *testing.T, e *Env) {
	// The freeze holds the transaction open past the lease: with the idle bound the
	// thawed server could end the session before it reads COMMIT.
	w := oneWorker(e, "-job", "0s", "-commit-delay", commitDelay.String(), "-timeout", "6s", "-idle-timeout", "30s")
	t1 := commitSent(e, w)
	e.CutDatabase()
	e.ThawDatabase() // the server commits; its reply cannot reach the worker
	o := outcome(e, w, t1)
	e.RestoreDatabase()
	c := commitsAfter(e, w, t1)
	t.Logf("timeline (lease %v):\n%s", Lease, e.Timeline())
	if o.Kind != "unknown" {
		t.Fatalf("the write whose COMMIT reply was lost: %s (%s), want unknown (fence.ErrCommitUnknown)", o.Kind, o.Err)
	}
	wantFate(t, e, t1, true, c.Token)
	wantHistory(t, e, func(r Report) bool { return r.Acked >= 1 && r.Unknown == 1 && r.UnknownLanded == 1 })
}

// wantFate checks account-42's row: the write with token landed or not, and the
// write with last is the latest.
func wantFate(t *testing.T, e *Env, token int64, landed bool, last int64) {
	t.Helper()
	row, err := e.account(t.Context(), "account-42")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stored row: account-42 balance %d, written by tokens %v", row.Balance, row.Tokens)
	if slices.Contains(row.Tokens, token) != landed || len(row.Tokens) == 0 || row.Tokens[len(row.Tokens)-1] != last {
		t.Fatalf("want the write with token %d landed: %v, and the one with token %d last", token, landed, last)
	}
}

func dbCutOff(t *testing.T, e *Env) {
	ws := loadWorkers(e)
	e.CutDatabase()
	e.Sleep(Lease + 2*time.Second)
	e.RestoreDatabase()
	recovers(e, ws)
	wantHistory(t, e, func(r Report) bool { return r.Acked >= 12 })
}

func dbFrozen(t *testing.T, e *Env) {
	ws := loadWorkers(e)
	e.FreezeDatabase()
	e.Sleep(Lease + 2*time.Second)
	e.ThawDatabase()
	recovers(e, ws)
	wantHistory(t, e, func(r Report) bool { return r.Acked >= 12 })
}
