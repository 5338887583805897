// Package engine is the production code the adapters, lockclient and migrations share,
// linked into users' binaries: a grant checked and normalized once at an adapter's door
// (grant.go), the one lifecycle of a fenced transaction over a handle each adapter
// implements (lifecycle.go), PostgreSQL's fence raise and refusal written once for pgx
// and database/sql (postgres.go), the one SQL Dialect with identifier checking and
// quoting (dialect.go), the bounded cache of statement shapes (shapes.go), and the
// checks of idempotency keys and lock names. fence imports none of it.
package engine

import (
	"errors"
)

// Tx is an open fenced transaction as its adapter runs it.
type Tx interface {
	// Refused returns the fence's refusal if one happened while fn ran (a raise
	// that travelled with fn's first statement), or nil.
	Refused() error
	// Commit commits and returns the adapter's error for a failed commit (a
	// fence.ErrCommitUnknown when its reply was lost).
	Commit() error
	// Rollback ends the transaction if it is still open; it must be safe to call
	// after a failed Commit.
	Rollback()
}

// RunTx calls fn, then commits tx unless fn failed, the fence refused (even if fn
// swallowed the refusal), or g's Done channel has closed (fence.ErrLost: the grant
// is known lost, so nothing commits). Every error and every panic rolls tx back; a
// panic then goes on. When fn fails after swallowing a refusal, both errors are
// returned, joined.
func RunTx(g *Checked, tx Tx, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			tx.Rollback()
		}
	}()
	if err := fn(); err != nil {
		if r := tx.Refused(); r != nil && !errors.Is(err, r) {
			return errors.Join(r, err)
		}
		return err
	}
	if r := tx.Refused(); r != nil {
		return r
	}
	if err := CheckLost(g); err != nil {
		return err
	}
	return tx.Commit()
}
