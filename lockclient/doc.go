// Package lockclient takes named locks in etcd whose every grant carries a fencing
// token, for work that must never run twice at once.
//
// # Session lease
//
// A Client holds one etcd lease at a time, its session (default TTL 10 s),
// granted by its first acquire and renewed by the session's goroutine on one
// long-lived keepalive stream (one gRPC stream per session, not one per
// renewal). Every lock key the Client creates is attached to it. A process
// that crashes, freezes or is cut off stops renewing; etcd expires the lease and
// deletes its keys, and the locks pass on. There is no lease per lock (each
// lease expiry or revoke costs etcd a synchronous disk commit) and no goroutine
// per lock.
//
// The session renews by need. While the Client holds a lock it renews every
// TTL/3 (WithRenewInterval), up to a tenth early, so that a renewal or two may
// fail before the deadline passes. While it holds none it renews every TTL/2
// (or at the renewal interval, if that is longer), and when such a renewal goes
// unanswered it sends one more on the same stream TTL/4 later (half the gap
// between its interval and the TTL), so an idle session survives a failed renewal
// too; a renewal that fails with an error is retried within 100 ms, at either
// cadence. While etcd takes longer than a tenth of the TTL to answer, an idle
// session renews as often as a busy one, since a later renewal leaves less
// time for a slow answer. When a lock is granted more than a renewal interval
// after the session's last keepalive was sent, the session renews at once, so
// the lock starts with the tolerance of a busy session. An idle session thus
// sends a third fewer renewals; what it risks is only itself (its loss ends no
// lock), but every lease expiry costs etcd a synchronous commit, so it is
// kept alive with the same care.
//
// The stream is kept on etcd's leader where that can be had: a follower
// forwards each renewal it receives to the leader (an HTTP request between
// members), which costs etcd more than the renewal itself. The clientv3
// connection places each new stream on a member of its own choosing, so a
// stream whose first answer comes from a follower is replaced by a new one, at
// most a few times per raft term, after one Status call to learn the leader.
// Only a stream with no renewal awaiting its answer is replaced.
//
// MinTTL is 2 s: etcd grants no lease shorter than 1.5 x its election timeout
// (1 s by default), rounded up to seconds, and silently raises shorter requests.
//
// # Tokens
//
// Acquire is one Txn: create the key under the session lease if it is absent,
// else read it. The lock's token is the key's create revision. etcd revisions are
// global, stored through raft and never reused, so a later grant of any lock has
// a higher token, across leader changes and restarts. A waiting Acquire watches
// the key for its deletion and writes nothing; Release is one Txn that deletes the
// key only if its create revision is still the token, so a stale holder can never
// delete its successor's key.
//
// Hand the *Lock to fence.Exec or an adapter: the database refuses a write whose
// token is lower than one it has already stored for the resource. That, not the
// lease, is what stops a holder that woke after its lock passed on.
//
// # Sets
//
// AcquireSet takes several names all-or-nothing in one Txn (create every key
// only if none exists), so the whole set has one token: every key put in one Txn
// has the Txn's revision as its create revision. A waiting AcquireSet watches the
// keys that blocked it and writes nothing; it holds none of its names while it
// waits, so sets listed in any order cannot deadlock. The set is one *Lock whose
// Resources are its names (every Lock is a fence.Set): adapters raise the stored
// token of every name. It is released in one Txn and lost as a whole. A set has at most MaxSetSize names (etcd's default
// --max-txn-ops).
//
// # Cutting off a holder
//
// NextToken returns etcd's current revision + 1: above every token granted so
// far, and not above any token granted later. Raising a resource's stored token
// to it (package adapters/fencemark, or fencectl fence) refuses every earlier
// holder's fenced write at once, whether or not anyone holds the lock.
//
// # Leadership and watching
//
// Lead runs a function on exactly one process at a time: it campaigns (an
// Acquire), calls the function with each term won (a *Lock with its own
// token, so a deposed leader's fenced writes are refused), campaigns again
// after a lost term and releases the lock when its ctx ends, so a successor
// takes over at once. A term, unlike a plain Lock, watches its own key and ends
// within moments of its deletion. WithValue stores a value with the term (the
// leader's address), returned by Holder, List and Watch as Info.Value.
//
// Watch and WatchPrefix report who holds a lock, live: taken, released,
// expired, in etcd's order, on one etcd watch, writing nothing; they resume
// after member loss and reconnects and re-read the state when etcd compacted
// the history they missed.
//
// # Loss
//
// The Client keeps a conservative deadline: the time it SENT the last renewal
// that etcd confirmed, plus the TTL etcd returned. etcd counts the lease from
// when it received that renewal, so the local deadline passes first. When it
// passes without a newer confirmed renewal, or etcd answers that it no longer
// has the lease, the session is lost: every Lock of it ends (Done closes, its
// context is cancelled with a cause matching fence.ErrLost and ErrSessionLost
// that names the lock and its token). Loss is one-way: nothing revives those locks. The lost
// lease is not revoked (etcd expires it, or already has; a revoke would be one
// more synchronous write just when etcd is struggling).
//
// The Client itself outlives its session (only Close ends it): the next Acquire
// or TryAcquire starts a new session, after a
// jittered backoff (up to half a TTL, longer after each loss in a row) so that
// many Clients losing their sessions at once come back spread out. An Acquire
// that is waiting when its session is lost goes on under the new one; a
// TryAcquire whose session is lost during the call returns an error matching
// ErrSessionLost. Each loss is logged (Warn, "session lost") and reported to an
// Observer (lockmetrics counts them). The gap between
// etcd expiring a lease and a frozen process noticing is what fencing covers.
// (The deadline runs on Go's monotonic clock, which advances while the process
// is stopped but, on Linux, not while the whole machine is suspended; fencing
// covers that case too.)
//
// A lock taken WithManualRenewal(lease) must also be Renewed at least once per
// lease (0: the TTL). If it is not, the Client deletes its key
// itself (a Txn on the create revision) and ends it as lost, so a stuck job in a
// live process loses its lock too.
//
// # Restoring etcd from a backup
//
// A restored snapshot rewinds etcd's revision counter: new tokens would be lower
// than the ones the databases have already stored, and every fenced write would
// be refused with fence.ErrStale until the counter passes them again. That is a
// safe failure, not a silent one. etcd's remedy is to restore with a revision
// bump: etcdutl snapshot restore SNAPSHOT --bump-revision 1000000000
// --mark-compacted ..., with a bump larger than the revisions written since the
// snapshot.
//
// # Logs and metrics
//
// WithLogger logs grants, waits, releases, losses with their cause and failed
// keepalives as slog attributes; WithObserver reports the same events to an
// Observer, such as lockmetrics.Metrics (Prometheus). Both are off by default
// and then cost a nil check per call.
//
// # etcd with auth
//
// With etcd's auth enabled, give the Client a user whose role may read and
// write the lock prefix only (etcdctl role grant-permission ROLE readwrite
// /fencegate/locks/ --prefix); leases need no permission. Calls outside the
// role's prefix fail with an error that names the prefix and matches
// rpctypes.ErrPermissionDenied.
package lockclient
