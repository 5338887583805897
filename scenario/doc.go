// Package scenario runs a user's fenced job as several real worker processes
// against a real etcd and the user's own store, applies faults on a timeline
// (freeze a worker past its lease or with its write in flight, kill it, cut it off
// from etcd or the store, slow it; kill etcd's leader or a follower, crash the
// database), and checks the history of its writes against the store's final state.
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
// reaches for it (Granted after Worker.Acquire or Worker.AcquirePermit,
// AboutToWrite and Wrote around Worker.Write, InStore inside a fenced transaction
// of Store once the grant's check has passed, OnTheWire once a write's statement
// has left the process, Finished when the process ends). A worker that reaches a
// point a step waits for stops there until the step has acted, so "freeze a in its
// write" freezes it exactly there, not after a sleep. A fault that lasts is undone
// at its Until point or at its default end:
//
//	Start(w)             start w's process (all start at once without Start steps)
//	Freeze(w)            SIGSTOP; by default until etcd has expired w's locks
//	Kill(w)              SIGKILL
//	CutOff(w)            w's etcd connections cut; by default until its locks expired
//	Slow(w, d)           w's etcd traffic delayed d each way; by default until w ends
//	CutOffStore(w)       w's store connections cut; by default one lease (TTL) or w's end
//	KillEtcdLeader()     the leader member killed; back once another is leader
//	CrashEtcdFollower()  a follower killed, the leader leading on; back at once
//	CrashEtcd(i)         member i killed, leader or not; back once the others have a leader
//	CrashStore()         Config.StoreServer killed; back before the step returns
//
// The kit starts what it breaks: Config.EtcdMembers real etcd members (1, 3 or 5,
// through locktest; every worker reaches each through a proxy of its own, which
// CutOff and Slow act on) and Config.StoreServer, the server Config.Setup takes its
// DSN from (a *pgtest.Server: pgtest.New() in the test package, closed after
// Main). CutOffStore and OnTheWire need the worker to reach that server through its
// own proxy: build the DSN in the job with Worker.StoreDSN. A fault on a server the
// run did not start (no StoreServer, a member the cluster has not, Config.EtcdEndpoints'
// etcd), on one already down, or on a worker that has finished or does not exist
// fails the test saying what to do.
//
// # A write in flight
//
// A pause can come after every check a job makes: once a statement's bytes have
// left the process, no context can call them back. OnTheWire is that moment. While
// a step waits for it, each write the kit records for the worker (Worker.Write,
// Store) arms the worker's proxy to Config.StoreServer: the first chunk the worker
// then sends that runs a statement (a Query or Execute message; not a lone BEGIN,
// nor pgx's "-- ping") is kept, unsent, and the point is reached. The step acts
// (Freeze: the process is stopped while it waits for the answer), and when the step
// ends (its Until point, or at once for a fault that does not last) the kit
// delivers the kept bytes to the store and waits for its answer (a lease at most)
// before undoing the fault. Meanwhile the worker's cancel requests (pgx sends one
// on a connection of its own when a statement's context ends) are dropped, and a
// worker that closes its connection still has the kept bytes delivered, then its
// close. So
//
//	Start("a"), Freeze("a").When("a", OnTheWire).Until("b", Finished), Start("b")
//
// freezes a with its write on the way, past its lease; b takes the lock and
// writes; a's statement reaches the store after b's write, whatever a's code does
// with contexts when it wakes. The statement runs with a's old token: a fenced
// store refuses it (refused stale, or commit unknown when a's lock context won the
// race to a's answer). It lands, and the verdict names b's lost write, when that
// statement completes the write: a statement outside a transaction, a transaction
// sent in one flight (pgxfence sends BEGIN, the fence and the function's first
// statement at once), or a statement of a transaction the job commits afterwards
// on a context still live (its own ctx). A transaction on the lock's context,
// committed in a later round trip, lands only when its COMMIT leaves before the
// worker's lock client notices the loss (2 of 8 runs here; PostgreSQL rolls the
// others back): the same race a real pause runs, so run such a test several
// times. OnTheWire reads PostgreSQL's protocol in plain text (pgtest's server);
// it is refused at once without Config.StoreServer, or when the worker's
// statements do not pass its proxy.
//
// SQLite has no network hop: a write is a call inside the worker, and a write
// begun holds the database's write lock until it ends, so no successor writes
// before it. The pause that matters there is before the write (InStore,
// AboutToWrite): a job that checks its lock after that point (statements on the
// lock's context, a check inside the transaction) stops itself when it wakes,
// with no stale write, and passes even without a fence; the kit catches there the
// unfenced job that does not look again (statements on its own ctx).
//
// What the verdict covers, on PostgreSQL with a frozen at OnTheWire (on SQLite
// at InStore), for a fenced job and the same job without a fence:
//
//	statements on the job's ctx              pass, fail (pass, fail on SQLite)
//	statements on l.Context() (quick start)  pass, fail (pass, pass on SQLite)
//	the lock checked inside the transaction  pass, fail (pass, pass on SQLite)
//
// A job's error fails the test unless it is fence.ErrStale, fence.ErrLost, or a
// cancellation (context.Canceled) once one of the locks the worker took through
// Worker.Acquire or AcquirePermit has ended: a fenced job whose statements ran on
// its lock's context stops that way, and needs no mapping of its own.
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
//	CrashEtcdFollower           longest gap between grants 33-280 ms (20 runs,
//	                            two workers taking turns); CrashEtcd of the
//	                            member that led: 7.1 s (1 of 8 runs of CrashEtcd(2))
//	CrashStore                  the store down 0.4-0.6 s
//
// # Events
//
// Events (History.Events, and the timelines a failure prints) are one line per
// thing that happened, in order, each with its sequence number, its time since
// the run began and its worker: "started (pid N)", "granted "res" token N" (a
// permit: "granted "name/0001" token N (permit of "name": 2 of 3 held)"), "about to
// write", "write "res" token N value "v" begins", the write's outcome, "wrote",
// "reached "<point>"" for every other point (InStore, OnTheWire and each of
// Worker.Reach's), "the held statement delivered to the store: answered", "job
// returned "<error>"", "finished" or "ended: <status>"; the faults' "frozen"/"thawed",
// "killed", "cut off from etcd"/"reconnected to etcd", "etcd traffic slowed by
// d"/"etcd traffic at full speed", "cut off from the store"/"reconnected to the
// store". A write's outcome event reads
//
//	write "acct-7" token 6 value "6": acknowledged
//	write "acct-7" token 4 value "4": refused stale: fence: stale token 4 for "acct-7": 6 already seen
//
// that is the write, then its Outcome ("acknowledged", "refused stale", "refused
// lost", "commit unknown"), then ": " and the write's error if it had one; the
// event's Outcome field holds the same, so a test need not parse the text, and the
// WriteRecord's End is its Seq. The servers have timelines of their own, under
// the worker names "etcd" ("member 2 (follower; member 0 leads, term 2) killed",
// "member 0 (leader, term 2) killed", "member 1 is leader, term 3", "member 0
// restarted (down d)") and "store" ("crashed", "restarted (down d)"), so no worker
// may be called etcd or store. A term that stays the same across a crash means no
// election was held.
//
// # The verdict
//
// Workers record their writes with Worker.Write, or without touching the job's
// code by handing it Store(w, store): every fenced transaction through it is
// recorded, its value the grant's token.
//
// History.Check, per resource: every token was granted to one worker; no
// acknowledged write of a lower token began after one of a higher token was
// acknowledged; the final value was written by a write whose token is at least the
// highest acknowledged one (so no acknowledged write was lost unless a higher token
// overwrote it); a write refused as stale never landed. A write whose outcome is
// unknown (the worker killed in it, fence.ErrCommitUnknown, any other error) may
// or may not have landed. Worker.Write and Store record no "rolled back": a failed
// write there is refused or commit unknown. RolledBack is for a harness that builds
// the history from its store's own account, where a transaction it saw roll back
// (the e2e suite's workers log each one they abort) must not have landed.
//
// A permit (Worker.AcquirePermit) is recorded under its slot, name/NNNN: each slot
// gets the rules of a resource (a token granted once, writes in token order, the
// final state), and its semaphore one more: at the grant's revision
// (its token) etcd held at most n of its slots, n the largest any grant of it
// asked for (read back from etcd as each grant is recorded).
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
