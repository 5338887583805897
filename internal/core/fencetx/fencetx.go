// Package fencetx is the one lifecycle of a fenced transaction, shared by every
// adapter and every fenced write of several requests (fence.Exec's transactions and
// the single-row writes that run in one): after the begin and the raise, run the
// caller's function, keep a refusal it swallowed, refuse to commit for a grant known
// lost, commit, and roll back on any error or panic. It reads like pgx's
// beginFuncExec; what differs per driver is behind Tx.
package fencetx

import (
	"errors"

	"github.com/fencegate/fencegate/internal/core/grant"
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

// Run calls fn, then commits tx unless fn failed, the fence refused (even if fn
// swallowed the refusal), or g's Done channel has closed (fence.ErrLost: the grant
// is known lost, so nothing commits). Every error and every panic rolls tx back; a
// panic then goes on. When fn fails after swallowing a refusal, both errors are
// returned, joined.
func Run(g *grant.Checked, tx Tx, fn func() error) (err error) {
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
	if err := grant.CheckLost(g); err != nil {
		return err
	}
	return tx.Commit()
}
