// Package scenario runs a user's fenced job as several real worker processes
// against a real etcd and the user's own store, applies faults on a timeline
// (freeze a worker past its lease, kill it, cut it off from etcd, slow it), and
// checks the history of its writes against the store's final state.
//
// The test binary is the worker: Run starts it again for each worker, and the
// re-executed binary runs only the calling test, where Run runs the job instead of
// the scenario. So a package using the kit needs one line in TestMain:
//
//	func TestMain(m *testing.M) { scenario.Main(m) }
//
// and everything a worker needs (a database file, a DSN) must come from
// Config.Setup, which runs once in the test process: code before Run runs in the
// workers too.
//
// Faults are steps. A step acts at once, a time After the previous one, or when a
// worker reaches a point: one the
// job names with Worker.Reach, or one the kit reaches for it (Granted after
// Worker.Acquire, AboutToWrite and Wrote around Worker.Write, Finished when the
// process ends). A worker that reaches a point a step waits for stops there until
// the step has acted, so "freeze a at its write" freezes it exactly there, not after
// a sleep. Freeze and CutOff last until their Until point, or by default until
// etcd has expired the worker's locks.
//
// Workers record their writes with Worker.Write, or without touching the job's
// code by handing it Store(w, store): every fenced transaction through it is
// recorded, its value the grant's token.
//
// The verdict (History.Check), per resource: every token was granted to one worker;
// no acknowledged write of a lower token began after one of a higher token was
// acknowledged; the final value was written by a write whose token is at least the
// highest acknowledged one (so no acknowledged write was lost unless a higher token
// overwrote it); a write refused as stale never landed. A write whose outcome is
// unknown (the worker killed in it, fence.ErrCommitUnknown, any other error) may
// or may not have landed; one reported rolled back never landed.
//
// A harness that reads the store's own account back (History.Commits, Kept,
// Crashes; the e2e suite does) gets these rules too, per resource: no token was
// committed twice, and committed tokens go up in commit order; every acknowledged
// write is committed as written (worker and value), no refused or rolled-back write
// is, and a commit-unknown one that landed landed as written; every acknowledged or
// landed write is kept by the final state, which keeps tokens in order and none that
// was not committed (a commit it does not keep is a lost update); and a worker has
// at most one commit with no recorded write per crash (killed between its COMMIT and
// its record). A failure names the resource, the tokens and every worker's
// timeline.
//
// The package is a module of its own, so a program that imports fencegate's
// lockclient and adapters pays nothing for it.
package scenario

import "errors"

var (
	// ErrViolation is what History.Check returns (as a *ViolationError) when the
	// history breaks one of the rules in the package doc.
	ErrViolation = errors.New("scenario: history check failed")
)
