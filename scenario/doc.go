// Package scenario runs a user's fenced job as several real worker processes
// against a real etcd and the user's own store, applies faults on a timeline
// (freeze a worker past its lease, kill it, cut it off from etcd or the store,
// slow it; kill etcd's leader or a member, crash the database), and checks the
// history of its writes against the store's final state.
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
// worker reaches a point: one the job names with Worker.Reach, or one the kit
// reaches for it (Granted after Worker.Acquire, AboutToWrite and Wrote around
// Worker.Write, InStore inside a fenced transaction of Store once the grant's
// check has passed, Finished when the process ends). A worker that reaches a point
// a step waits for stops there until the step has acted, so "freeze a in its
// write" freezes it exactly there, not after a sleep. A fault that lasts is undone
// at its Until point or at its default end:
//
//	Start(w)            start w's process (all start at once without Start steps)
//	Freeze(w)           SIGSTOP; by default until etcd has expired w's locks
//	Kill(w)             SIGKILL
//	CutOff(w)           w's etcd connections cut; by default until its locks expired
//	Slow(w, d)          w's etcd traffic delayed d each way; by default until w ends
//	CutOffStore(w)      w's store connections cut; by default one lease (TTL) or w's end
//	KillEtcdLeader()    the leader member killed; back once another is leader
//	CrashEtcd(i)        member i killed; back once the others have a leader
//	CrashStore()        Config.StoreServer killed; back before the step returns
//
// The kit starts what it breaks: Config.EtcdMembers real etcd members (1, 3 or 5,
// through locktest; every worker reaches each through a proxy of its own, which
// CutOff and Slow act on) and Config.StoreServer, the server Config.Setup takes its
// DSN from (a *pgtest.Server: pgtest.New() in the test package, closed after
// Main). CutOffStore needs the worker to reach that server through its own proxy:
// build the DSN in the job with Worker.StoreDSN. A fault on a server the run did
// not start (no StoreServer, a member the cluster has not, Config.EtcdEndpoints'
// etcd), on one already down, or on a worker that has finished or does not exist
// fails the test saying what to do.
//
// What the faults cost, with the default lease (Config.TTL 2 s), measured from the
// fault to the next holder's grant (two workers, one lock, the holder releasing as
// soon as it can; 2 to 3 runs on two shared cores):
//
//	Freeze, Kill, CutOff        2.0-2.5 s (a lease and the lock client's check)
//	Slow(w, 50ms), (w, 300ms)   w's first acquire takes 0.35 s, 1.85 s (2d a round trip)
//	KillEtcdLeader, 3 members   7.2-7.5 s: the holder's release fails in the
//	                            election, and the new leader renews every lease
//	KillEtcdLeader, 1 member    1.1 s (etcd down while it restarts)
//	CrashEtcd of a follower     60-140 ms (once 7.3 s on a loaded machine)
//	CrashStore                  the store down 0.4-0.6 s
//
// Events (History.Events, and the timelines a failure prints) are one line per
// thing that happened, in order, each with its sequence number, its time since
// the run began and its worker: "started (pid N)", "granted "res" token N",
// "about to write", "write "res" token N value "v" begins", the write's outcome
// ("acknowledged", "refused stale: ...", "refused lost: ...", "commit unknown:
// ..."), "wrote", "reached "<point>"" for every other point (InStore and each of
// Worker.Reach's), "job returned "<error>"", "finished" or "ended: <status>"; the
// faults' "frozen"/"thawed", "killed", "cut off from etcd"/"reconnected to etcd",
// "etcd traffic slowed by d"/"etcd traffic at full speed", "cut off from the
// store"/"reconnected to the store". The servers have timelines of their own,
// under the worker names "etcd" ("member i (leader) killed", "member j is
// leader", "member i restarted (down d)") and "store" ("crashed", "restarted
// (down d)"), so no worker may be called etcd or store.
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
