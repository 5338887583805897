// Package nolock is the no-lock path, for when one row decides and the database
// settles the race in one statement, with no lock service: a guarded decrement
// (Counter), an insert refused on a unique key, an idempotency key that runs a
// request at most once (Result). The adapters' Stores (pgxfence, sqlfence)
// implement them as Decrement, Insert and Once; this package holds their shared
// types and errors.
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
