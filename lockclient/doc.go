// Package lockclient takes named locks in etcd whose every grant carries a
// fencing token, for work that must never run twice at once.
//
// The contract:
//
//   - A Client holds one etcd lease at a time, its session, renewed on one
//     keepalive stream; every lock key it creates is attached to it. A process
//     that crashes, freezes or is cut off stops renewing, etcd deletes its keys
//     and the locks pass on. There is no lease and no goroutine per lock.
//   - Acquire is one Txn, and so is AcquirePermit: one attempt loop takes
//     names and permits alike. A lock's token is its key's etcd create revision:
//     global, stored through raft, never reused, so every later grant of any
//     lock carries a higher token, across leader changes and restarts.
//     AcquireSet takes several names all-or-nothing under one token.
//   - Waiting is first come, first served: a waiting Acquire (a Lead
//     campaign) writes its place in the name's line once, in the Txn that
//     found the lock held, watches only the place ahead of it, and holds the
//     lock when every place ahead is gone; its token is its place's create
//     revision, so tokens still rise in grant order. A waiter that gives up
//     leaves the line; a crashed one's place goes with its session lease.
//     AcquirePermit waits in its semaphore's line the same way; AcquireSet
//     keeps no place (it waits until every name's line is empty) and
//     TryAcquire never queues. Holder lists the line (Info.Waiting).
//   - Release is one Txn conditioned on the token: it never deletes a
//     successor's key.
//   - A Lock ends once, with a cause, and nothing revives it: Done closes and
//     context.Cause of its Context is ErrReleased, ErrClosed, or an error
//     matching fence.ErrLost (and ErrSessionLost when the session lease ran
//     out, ErrNotRenewed when a WithManualRenewal lock was not renewed,
//     ErrMaxHold when a WithMaxHold lock reached its max hold). Loss
//     is told conservatively, by the Client's own clock: its deadline is the
//     send time of its last confirmed renewal plus the TTL, which passes
//     before etcd's, and a timer ends the locks at it whatever the network
//     does (a cut connection, a frozen etcd, a stalled stream). Done and
//     Context look at the deadline too: a process that wakes from a pause
//     past it finds its locks ended at its first look, timer or not.
//   - The database is what fences. Hand the *Lock to fence.Exec or an adapter:
//     a write whose token is lower than one already stored for the resource is
//     refused. That, not the lease, stops a holder that woke after its lock
//     passed on; the gap between etcd expiring a lease and a frozen process
//     noticing is what fencing covers.
//   - Every call that talks to etcd is bounded. Acquire, AcquireSet,
//     AcquirePermit and Lead wait as long as their ctx lets them: it is their
//     only bound. Every other
//     call gives up after the session TTL (or ctx's earlier end) while etcd
//     does not answer, with an error matching context.DeadlineExceeded.
//   - A Client outlives a lost session: its next Acquire starts a new one after
//     a jittered backoff. Only Close ends a Client.
//
// Lead runs a function on one process at a time, each term a *Lock with its
// own token. Watch and WatchPrefix report who holds a lock, live. Holder and
// List read it once. NextToken is the operator's fence: above every token
// granted so far.
//
// Semaphores: AcquirePermit(ctx, name, n) grants one of n permits, each a
// *Lock on a slot name/NNNN (the first free slot below n) with its own token.
// The first permit marks name as a semaphore in etcd (a key without a lease):
// from then on Acquire refuses name and AcquirePermit refuses a lock's name,
// both with fence.ErrInvalidArgument. n is per call, not stored: a call with n
// counts and takes only slots below n, and holders of higher slots (taken with
// a larger n) keep them until they release; so at most the largest n in use
// hold at once. A permit fences its slot: its Resource is the slot name, whose
// tokens only go up, so the store refuses a frozen holder's writes once its
// slot has passed on, while the other n-1 holders write on. Data that all
// holders share needs a fence of its own (per row, or a lock).
//
// Restoring etcd from a backup rewinds revisions: new tokens fall below the
// stored ones and every fenced write is refused with fence.ErrStale (safe, not
// silent). Restore with etcdutl snapshot restore --bump-revision N
// --mark-compacted, N above the revisions written since the snapshot.
//
// With etcd's auth, give the Client a role with readwrite on its prefix only
// (/fencegate/locks/ by default); leases need no permission.
//
// How the session renews, why the token is the create revision, and how
// waits resume are told in docs/design.md ("Inside lockclient").
package lockclient
