// Package fencedtx is what the SQL adapters' Stores share around a fenced
// transaction: Run, its one path from fn to COMMIT over a Tx the adapter began and
// raised (pgx's beginFuncExec, with the fence's refusal and a lost grant added), and
// the Settings every Store's options set alike.
package fencedtx

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/nolockpath"
)

// Tx is an open fenced transaction as its adapter runs it: what differs between
// databases and drivers, behind the one path Run takes.
type Tx interface {
	FnErr(err error) error // fn's error as the adapter reports it (fence.ErrIdleTimeout for a transaction the server ended)
	Refused() error        // the fence's refusal met while fn ran (a raise sent with fn's first statement), or nil
	Commit() error         // the adapter's error for a failed commit (fence.ErrCommitUnknown for a lost reply)
	Rollback()             // ends the transaction if still open; safe after a failed Commit
}

// Run calls fn(fnTx), then commits tx unless fn failed, the fence refused (even if fn
// swallowed it: then joined to fn's error) or g is lost (fence.ErrLost). Every error
// and panic rolls tx back; a panic goes on.
func Run[T any](g *grant.Checked, tx Tx, fnTx T, fn func(T) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			tx.Rollback()
		}
	}()
	if err := tx.FnErr(fn(fnTx)); err != nil {
		if r := tx.Refused(); r != nil && !errors.Is(err, r) {
			return errors.Join(r, err)
		}
		return err
	}
	if r := tx.Refused(); r != nil {
		return r
	}
	if err := g.Lost(fence.ErrLost); err != nil {
		return err
	}
	return tx.Commit()
}

// Settings are the options every SQL adapter's Store takes alike, checked alike.
type Settings struct {
	Idle   time.Duration       // WithIdleTimeout; 0: the grant's lease or grant.DefaultIdleTimeout
	Obs    fence.WriteObserver // WithObserver; nil: none
	KeyTTL time.Duration       // WithKeyTTL; 0: idempotency keys never expire
}

// SetIdleTimeout is WithIdleTimeout: d must be at least a millisecond, the servers' unit.
func (s *Settings) SetIdleTimeout(adapter string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%s: WithIdleTimeout(%v): want at least 1ms: %w", adapter, d, fence.ErrInvalidArgument)
	}
	s.Idle = d
	return nil
}

// SetKeyTTL is WithKeyTTL (see nolockpath.CheckKeyTTL).
func (s *Settings) SetKeyTTL(adapter string, d time.Duration) error {
	if err := nolockpath.CheckKeyTTL(d); err != nil {
		return fmt.Errorf("%s: %w", adapter, err)
	}
	s.KeyTTL = d
	return nil
}

// IdleMS is the idle bound of c's transactions in milliseconds, as text.
func (s *Settings) IdleMS(c *grant.Checked) string {
	return strconv.FormatInt(c.IdleTimeout(s.Idle).Milliseconds(), 10)
}

// Observe reports a fenced write's result to the observer, if any.
func (s *Settings) Observe(adapter, op string, errp *error) {
	if s.Obs != nil {
		s.Obs.FencedWrite(adapter, op, *errp)
	}
}

// Apply runs a constructor's options on s, skipping nil ones, until the first error.
func Apply[S any, O ~func(S) error](s S, opts []O) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return err
		}
	}
	return nil
}
