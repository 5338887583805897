// Package fencetx is the one owner of a fenced transaction's lifecycle after its
// begin, shared by every adapter: run the caller's function, keep a refusal the
// function swallowed, refuse to commit for a grant known lost, commit, and roll back
// on any error or panic. Adapters supply the begin-and-raise (before Run), the commit
// (mapping their driver's errors, ErrCommitUnknown among them) and the rollback.
package fencetx

import (
	"errors"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/grant"
)

// Ops are an open fenced transaction's adapter-specific steps.
type Ops struct {
	// Commit commits and returns the adapter's error for a failed commit (a
	// fence.ErrCommitUnknown when its reply was lost).
	Commit func() error
	// Rollback ends the transaction if it is still open; it must be safe to call
	// after a failed Commit.
	Rollback func()
	// Refused returns the fence's refusal if one happened while fn ran (a
	// pipelined raise that travelled with fn's first statement), or nil. Optional.
	Refused func() error
}

// Run calls fn, then commits unless fn failed, the fence refused (even if fn
// swallowed the refusal), or g is a fence.Watched grant whose Done channel has closed
// (fence.ErrLost: the grant is known lost, so nothing commits). Every error and
// every panic rolls the transaction back; a panic then goes on. When fn fails after
// swallowing a refusal, both errors are returned, joined.
func Run(g fence.Grant, fn func() error, ops Ops) (err error) {
	defer func() {
		if p := recover(); p != nil {
			ops.Rollback()
			panic(p)
		}
		if err != nil {
			ops.Rollback()
		}
	}()
	refused := func() error {
		if ops.Refused == nil {
			return nil
		}
		return ops.Refused()
	}
	if err := fn(); err != nil {
		if r := refused(); r != nil && !errors.Is(err, r) {
			return errors.Join(r, err)
		}
		return err
	}
	if r := refused(); r != nil {
		return r
	}
	if err := grant.CheckLost(g); err != nil {
		return err
	}
	return ops.Commit()
}
