// Package fence holds what every fencegate adapter shares: fencing tokens, the grants a
// write presents, the errors a fenced write returns, and Exec, the one door to a
// fenced transaction. It imports no driver; the adapters (pgxfence, sqlfence, s3fence,
// fencemark) bring the database.
//
// # Grants and tokens
//
// A Token is a number that only goes up across the grants of one resource (a lock
// name such as "account-42"). A Grant is what a write presents: the resource and the
// token of the lock grant that allowed it. A *lockclient.Lock is a Grant; NewGrant
// makes one from a resource and token kept elsewhere. A grant may also be:
//
//   - Watched: it knows when its lock is lost (a Done channel);
//   - Leased: it knows how long its lease lasts, which bounds how long a fenced
//     transaction may sit idle on the server;
//   - a Set: several resources under one token, taken all-or-nothing.
//
// CheckGrant says why a grant cannot be presented, calling each of its methods once.
// Exec checks the grant there, once, before any I/O, and hands the Store the grant as
// read; an adapter called directly checks it the same way, once.
//
// # What is refused, and when
//
// The database keeps one high-water mark per resource: the highest token a write for
// it has presented. A fenced write raises the mark to its token in the same
// transaction (or the same statement) as the data, and the database refuses it when a
// higher token is stored. The stale holder of the GC-pause timeline, which woke after
// its lock passed on, is refused where its data would land.
//
// Store.Fenced, which Exec calls, is the contract every adapter with transactions
// implements:
//
//   - It begins a transaction, raises the mark of every resource of the grant (in
//     sorted order for a Set) to the grant's token, runs fn and commits. A higher
//     stored token refuses the transaction with a *StaleError; fn's error, a refusal,
//     or a panic in fn rolls everything back (the panic goes on): a refused
//     transaction writes nothing.
//   - Once raised, a resource's mark stays locked until commit: another transaction
//     that reaches it meanwhile waits, and is refused then if its token is lower.
//   - When the mark is raised is the adapter's documented choice: before fn runs, or
//     together with fn's first statement, which then never runs for a stale grant
//     (work fn does outside the database before that statement runs either way).
//   - A Watched grant whose Done channel is closed is refused before any I/O, and one
//     that closes by the time fn returns is rolled back with ErrLost, not committed.
//   - When COMMIT was sent and its reply lost, the result is ErrCommitUnknown, never
//     retried: the transaction may or may not have committed.
//   - A transaction the server ended for sitting idle past its bound (a holder frozen
//     inside it) returns ErrIdleTimeout from whichever statement notices.
//
// # Single-row writes
//
// The SQL adapters' Update, Upsert and Delete write one row of a table with a token
// column (a Row: the table, the token column and the key, which must pick at most one
// row: a primary key or unique index). They share the resource's mark with Fenced:
//
//   - Update sets the columns and the token column to the grant's token if neither
//     the row's token nor the mark is higher, and raises the mark in the same write.
//     Writing the values the row already has, with the same token, succeeds.
//   - Upsert inserts the row, or updates it as Update does. After a Delete by a newer
//     token the mark remembers the delete, so a stale Upsert cannot bring the row back.
//   - Delete removes the row under the same condition and raises the mark; a key that
//     picks several rows deletes nothing (ErrInvalidArgument).
//
// A write that changes nothing reads the tokens once more: a higher one (the row's or
// the mark's) is a *StaleError, a missing row ErrNotFound (the mark left as it was).
// Before any I/O they refuse with ErrInvalidArgument a Set of more than one resource,
// no key, no column to set (Update), a column named twice (in any case) and an empty, overlong or
// NUL-holding table or column name (other names are quoted, never refused). A new
// value that hits a unique index is a *nolock.DuplicateError; a lost reply to the
// write's one statement or COMMIT is ErrCommitUnknown.
//
// # Errors
//
// Match errors with errors.Is. ErrStale (as a *StaleError naming the resource, the
// token presented and the one seen) means a newer holder wrote: stop, retrying cannot
// succeed. ErrLost means the lock is known lost. ErrCommitUnknown means the outcome
// cannot be known: read the data to learn it. ErrBusy means the database refused the
// transaction for concurrent ones with nothing written: run it again. ErrIdleTimeout,
// ErrSchema, ErrNotFound and ErrInvalidArgument say what they name. Adapters wrap the
// driver's error where there is one.
//
// # Writing an adapter
//
// An adapter implements Store for its transaction type, so fn needs no casts, and
// refuses bad input before any I/O with ErrInvalidArgument. It raises the mark with a
// conditional write the database settles (an upsert that touches no row when a higher
// token is stored, a compare in a server-side script), never a read followed by a
// write. It reports each write to a WriteObserver when one is given. The Example
// below shows the contract's shape on a map; the real adapters hold the mark in the
// same database as the data, so that one commit stores both.
package fence
