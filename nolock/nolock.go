// Package nolock is the no-lock path, for when one row decides and the database
// settles the race in one statement, with no lock service: a guarded decrement
// (Counter), an insert refused on a unique key, an idempotency key that runs a
// request at most once (Result). The adapters' Stores (pgxfence, sqlfence)
// implement them as Decrement, Insert and Once; this package holds their shared
// types and errors.
//
// # Guarded decrements and unique inserts
//
// A Store's Decrement(ctx, c, n) takes n from c.Column of the one row c.Key picks
// (a primary key or unique index), only if at least n is left, and returns what is
// left after the take. When it takes nothing it reads the row once: less than n left
// returns what is left with ErrInsufficient, a missing row fence.ErrNotFound, and
// enough left (the counter was raised meanwhile) tries again, a few times at most.
// Insert(ctx, table, cols...) inserts one row; a unique-key violation is a
// *DuplicateError. Before any I/O both refuse with fence.ErrInvalidArgument an n <=
// 0, no key or no column, a column named twice (in any case), and an empty,
// overlong or NUL-holding table or column name (other names are quoted, never
// refused). Other database errors are wrapped.
//
// # Idempotency keys
//
// A Store's Once(ctx, key, fingerprint, fn) runs fn at most once per key, the way
// payment APIs do. In one transaction it inserts the key with its fingerprint, runs
// fn, stores fn's result on the key row and commits: fn's writes and the key commit
// or roll back together. A later call with the same key and fingerprint returns the
// stored result with Replayed = true and does not run fn; with another fingerprint
// it returns ErrKeyReused, and nothing runs. A concurrent duplicate waits for the
// first call's transaction, then replays its result, or runs fn itself if the first
// rolled back. Keys never expire unless the Store has WithKeyTTL: then a key counts
// as absent once its time-to-live has passed (the database's clock decides) and is
// replaced, whatever its fingerprint. fn's error is returned as it is, after rolling
// back fn's writes and the key, so that a retry runs fn again; if fn panics, the
// transaction rolls back and the panic goes on. Bad input (a nil fn, an empty key or
// one over MaxKeyLen bytes, a key or fingerprint that is not UTF-8 or holds a NUL, a
// fingerprint over 255 characters) is fence.ErrInvalidArgument, before any I/O; a
// missing idempotency_keys table is fence.ErrSchema.
package nolock

import (
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/fence"
)

// Errors of the no-lock path. Match them with errors.Is; DuplicateError, below,
// names the constraint and unwraps to ErrDuplicate and the driver's error.
var (
	// ErrInsufficient means a guarded decrement found less left than it wanted to
	// take; nothing was taken. Decrement returns what was left with it, and the
	// message says how much was wanted.
	ErrInsufficient = errors.New("nolock: insufficient")
	// ErrDuplicate means an insert hit a unique key (PostgreSQL 23505, MySQL 1062,
	// SQLite constraint-unique). *DuplicateError names the constraint where known.
	ErrDuplicate = errors.New("nolock: duplicate key")
	// ErrKeyReused means an idempotency key arrived with a different request
	// fingerprint than the one stored with it; nothing ran.
	ErrKeyReused = errors.New("nolock: idempotency key reused with a different request")
)

// Counter names one integer column of one row, for a guarded decrement:
// UPDATE t SET left = left - n WHERE key AND left >= n.
type Counter struct {
	Table  string      // table name, optionally schema-qualified as "schema.table"
	Key    []fence.Col // columns and values that pick exactly one row
	Column string      // the integer column taken from
}

// Result is what an idempotent call (an adapter's Store.Once) returns: the stored
// result of the one run that committed, and whether this call is a replay of it.
type Result struct {
	Value    []byte
	Replayed bool
}

// MaxKeyLen is the longest idempotency key, in bytes.
const MaxKeyLen = 200

// DuplicateError is returned when an insert hits a unique key. It unwraps to
// ErrDuplicate and to the driver's error.
type DuplicateError struct {
	Table      string // the table written, where the adapter knows it
	Constraint string // the constraint or index the database named, where it did
	Err        error  // the driver's error
}

func (e *DuplicateError) Error() string {
	if e.Constraint != "" {
		return fmt.Sprintf("nolock: duplicate key in %q (constraint %q)", e.Table, e.Constraint)
	}
	return fmt.Sprintf("nolock: duplicate key in %q", e.Table)
}

// Unwrap returns ErrDuplicate and the driver's error.
func (e *DuplicateError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrDuplicate}
	}
	return []error{ErrDuplicate, e.Err}
}
