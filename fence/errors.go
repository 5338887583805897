package fence

import (
	"errors"
	"fmt"
)

// Errors returned by this package and by every adapter. Match them with errors.Is;
// StaleError, below, carries the details of a refusal and unwraps to ErrStale.
var (
	// ErrStale means the database has already seen a higher token for the resource:
	// a newer holder wrote. Stop; retrying with the same grant can never succeed.
	ErrStale = errors.New("fence: stale token")
	// ErrLost means the grant's lock is known to be lost (its Done channel closed):
	// the write was refused before any I/O, or, for a fenced transaction whose grant
	// was lost by the time its function returned, rolled back instead of committed.
	// The error's message names the resource and the token and, for a grant with a
	// Context (a *lockclient.Lock), why it ended: its cause, wrapped (lockclient's
	// ErrReleased after Release, ErrClosed after the Client's Close).
	ErrLost = errors.New("fence: lock lost")
	// ErrCommitUnknown means a fenced write's outcome cannot be known: its COMMIT
	// (or, for a single-row write outside a transaction, its one autocommit
	// statement) was sent, or may have been, and its reply was lost: the connection
	// closed or broke, the server terminated the session, or ctx ended while waiting
	// for the reply. The write may or may not have landed. It is distinct from a
	// refusal (ErrStale), a rollback (fn's error) and a lost lock (ErrLost). The
	// error also wraps the driver's error and its message names the operation, the
	// resource and the token. No adapter retries such a write; read the data (or the
	// resource's stored token) to learn its fate. The connection is discarded, so a
	// pool serves the next call with a fresh one.
	ErrCommitUnknown = errors.New("fence: commit outcome unknown")
	// ErrBusy means the database refused the transaction because of concurrent ones,
	// with nothing written and the grant, if any, still current: run the whole
	// transaction again. It is the one error for a serialization failure (PostgreSQL
	// SQLSTATE 40001, under REPEATABLE READ or SERIALIZABLE), a deadlock (40P01, MySQL
	// 1213), a lock wait given up (55P03, MySQL 1205) and SQLite staying locked
	// (SQLITE_BUSY, SQLITE_LOCKED), in every adapter; it wraps the driver's error.
	ErrBusy = errors.New("fence: database busy, retry the transaction")
	// ErrIdleTimeout means the database ended a fenced transaction that sat idle
	// past its bound (the grant's lease, or the adapter's idle-timeout option):
	// nothing of it was stored. It is what a holder frozen inside its transaction
	// gets when it wakes.
	ErrIdleTimeout = errors.New("fence: fenced transaction ended by the server: idle past its timeout")
	// ErrSchema means the database lacks fencegate's tables (fence_tokens and, for
	// idempotency keys, idempotency_keys): apply the migrations (migrations.Up); or a
	// single-row write's table lacks its token column: the error names the migration
	// that adds it (migrations.GenerateTokenColumn).
	ErrSchema = errors.New("fence: fencegate schema missing, run migrations.Up")
	// ErrNotReplicated means a fenced write committed on the primary, but the
	// database said it may not have reached the replicas it was to wait for (with
	// PostgreSQL, a COMMIT whose wait for a synchronous standby was cancelled). It is
	// not a refusal: the write is stored, and a failover to a replica may undo it, and
	// with it the resource's mark. The error's message names the resource and token.
	ErrNotReplicated = errors.New("fence: write not confirmed replicated")
	// ErrNotFound means the row a write names does not exist.
	ErrNotFound = errors.New("fence: row not found")
	// ErrInvalidArgument means bad input, refused before any I/O: a nil store, grant
	// or function; a token <= 0; a resource name that is empty, longer than
	// 200 bytes, not UTF-8 or holding a NUL byte; a table or column name that is
	// empty, not UTF-8, holds a NUL byte or is longer than the database allows
	// (PostgreSQL 63 bytes, MySQL 64 characters, SQLite 128 characters, a bound of
	// fencegate's; other characters are quoted, never refused); an unknown dialect;
	// an unusable option or constructor argument; an amount <= 0, an empty key. The
	// message names the problem; match the sentinel, not the message.
	ErrInvalidArgument = errors.New("fence: invalid argument")
)

// StaleError is returned when a write's token is lower than one the database has
// already stored for the resource. It unwraps to ErrStale.
type StaleError struct {
	Resource  string // the resource the write was for
	Presented Token  // the token the write carried
	Seen      Token  // the higher token already stored; 0 when the database did not say
}

func (e *StaleError) Error() string {
	if e.Seen > 0 {
		return fmt.Sprintf("fence: stale token %d for %q: %d already seen", e.Presented, e.Resource, e.Seen)
	}
	return fmt.Sprintf("fence: stale token %d for %q: a higher token was seen", e.Presented, e.Resource)
}

// Unwrap returns ErrStale.
func (e *StaleError) Unwrap() error { return ErrStale }
