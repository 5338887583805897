// Package redisfence fences writes to Redis with a lock's fencing token, so that a
// holder frozen past its lease cannot write its stale state over its successor's:
// a job's progress, a computed report, a counter, a session.
//
// Every resource has one mark in Redis, beside its data: the hash at
// MarkKey(resource) (fencegate:{resource}), whose field token holds the highest
// token that has written any key of the resource. Every fenced write runs one Lua
// script that checks and raises the mark and writes the data in the same atomic
// server-side step, one round trip (EVALSHA, and EVAL once when the server does not
// have the script yet), refusing a lower token with a *fence.StaleError:
//
//	store, err := redisfence.New(rdb) // a *redis.Client or *redis.ClusterClient
//	...
//	lock, err := locks.Acquire(ctx, "report-42")
//	...
//	err = store.Set(ctx, lock, "{report-42}:csv", report, 0)
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop, do not retry */ }
//
// # Write forms
//
// Set (SET, with an optional expiry), HSet (HSET), Delete, and Fenced, a fenced
// transaction of any commands queued on a go-redis pipeline, which makes the Store
// a fence.Store so that fence.Exec works on Redis. All share the resource's one
// mark: a write in any form refuses a lower token than any earlier write of the
// resource, on any of its keys. Get and HGetAll read a key with the stored token
// for a read-modify-write whose write-back is a fenced write.
//
// # Fenced transactions
//
// Fenced runs the commands fn queued on a go-redis pipeline in one script, after
// the fence: one round trip, atomic, nothing else between the check, the raise
// and the commands, which run as EXEC runs a MULTI's (one failing does not undo
// the others). fn sees no replies while it runs; they fill its commands when
// Fenced returns:
//
//	err := fence.Exec(ctx, store, lock, func(tx redis.Pipeliner) error {
//		tx.Set(ctx, "{job-7}:progress", 100, 0)
//		tx.HIncrBy(ctx, "{job-7}:stats", "runs", 1)
//		return nil
//	})
//
// A grant over several resources (fence.Set) raises each one's mark; on a
// Cluster their marks and keys must share one slot (a common hash tag:
// "{order-7}:invoice", "{order-7}:stock").
//
// # Commands
//
// Fenced knows each command's keys the way the server defines them: it reads the
// server's command table (COMMAND, whose key positions Redis 7 derives from its
// key specifications) once per Store, on the first Fenced that queues a command
// (a failed read, ErrCommandTable, is read again next time). For commands whose
// keys move with their arguments (movablekeys: SORT and GEORADIUS with STORE,
// ZUNIONSTORE, LMPOP, ...) it asks the server (COMMAND GETKEYS), for all of them in
// one round trip before the script, only when fn queued one. Refused with
// fence.ErrInvalidArgument naming the command and why, before the script is
// sent: a command the server does not know or with the wrong number of
// arguments; one Redis refuses in scripts (MULTI, EVAL, SUBSCRIBE, ...), that may
// block (XREAD) or is administrative; a write naming no key (FLUSHALL, FLUSHDB,
// SWAPDB), which would reach every mark; SELECT, MOVE, COPY ... DB and MIGRATE,
// which reach another database or server the marks do not fence; a command
// whose keys the server cannot tell; and any command naming a key beginning
// "fencegate:" or, on a Cluster, a key of another slot than the marks'. So no
// command in a fenced transaction can change, delete or rename a mark.
//
// # Deletes
//
// Delete removes the key (plain readers see it gone) and leaves its tombstone in
// the mark: the deleting token, so that Get reports fence.ErrNotFound naming it.
// A stale holder cannot bring the key back, since the mark was raised. Tombstones
// stay until the key is written again: a resource that deletes keys of ever new
// names keeps a field per name in its mark.
//
// # Keys and Cluster slots
//
// A script may only touch keys of one Cluster slot, so a resource's data keys must
// share its mark's slot: name them with the resource as hash tag,
// "{report-42}:csv", or, for a resource that has a hash tag of its own
// ("{order-7}:invoice"), with that tag. On a *redis.ClusterClient a key of another
// slot is refused with fence.ErrInvalidArgument before any I/O; on a single node
// every key is accepted, but keys named this way keep working on a Cluster. Keys
// beginning "fencegate:" are the Store's.
//
// # Durability
//
// Marks are as durable as the data they guard, because Redis stores them the same
// way in the same step. With the append-only file synced on every write
// (appendonly yes, appendfsync always) an accepted write survives a crash or
// restart, mark and data. With appendfsync everysec (Redis's default when AOF is
// on), RDB snapshots only, or a failover to an asynchronous replica, the last
// second or so of writes can be lost, marks and data together: the mark may fall
// back to an older token, but never below the data it guards, so a holder the
// lost write refused may then write again. WithWaitReplicas makes each accepted
// write wait for replicas (WAIT, a second round trip on the write's connection;
// a stale refusal does not wait), so that a failover to one of them keeps it; it
// does not make a replica sync its AOF, nor stop a failover from promoting a
// replica that missed the write. A maxmemory-policy that evicts any
// key (allkeys-*) can evict a mark: use noeviction or a volatile-* policy (marks
// have no expiry).
//
// # Errors
//
// Refusals are fence's: *fence.StaleError (fence.ErrStale) with the token seen;
// fence.ErrLost for a fence.Watched grant whose lock is lost, before any I/O;
// fence.ErrNotFound for a key absent or deleted; fence.ErrInvalidArgument, naming
// the problem, for bad input and typed nils, before any I/O; fence.ErrCommitUnknown
// when a script was sent and its reply lost (a broken connection, ctx ended): the
// write may or may not have landed, and the Store never sends it again (it tells
// go-redis not to resend it either). ErrNotReplicated comes from WithWaitReplicas,
// ErrCommandTable from Fenced when the server's command table cannot be read.
// Single-key writes refuse a grant over several resources (fence.Set); Fenced
// raises every resource's mark.
package redisfence
