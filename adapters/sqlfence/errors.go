package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// undecided is replyLost for an error no database's classification decided: errors
// database/sql or the driver raise before sending (driver.ErrBadConn, a done Tx or
// Conn, ctx's own error returned unwrapped by database/sql when ctx ended before the
// COMMIT went out) are decided; a broken or closed connection (EOF, a network error,
// ctx ending while the reply was awaited) leaves the outcome unknown.
func undecided(err error, commit bool) bool {
	switch {
	case err == nil, errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrTxDone), errors.Is(err, sql.ErrConnDone):
		return false
	case commit && (err == context.Canceled || err == context.DeadlineExceeded):
		// Tx.Commit checks ctx before sending; a driver that reads the reply under
		// ctx wraps its error.
		return false
	}
	return true
}

// unknownOutcome returns fence.ErrCommitUnknown for err, from a COMMIT or from a
// write sent outside a transaction, when its reply was lost: the statement was (or
// may have been) sent and no answer of the server's decides it. Otherwise nil.
func (s *Store) unknownOutcome(op string, g fence.Grant, err error, commit bool) error {
	if err == nil || !s.d.replyLost(err, commit) {
		return nil
	}
	return engine.CommitUnknown(g, op, err)
}

// idleEnded returns fence.ErrIdleTimeout wrapping err when err, from fn (commit
// false) or from COMMIT, says that the server ended the fenced transaction begun at
// begun for sitting idle past its timeout; otherwise nil.
func (s *Store) idleEnded(g fence.Grant, begun time.Time, err error, commit bool) error {
	if err == nil || errors.Is(err, fence.ErrIdleTimeout) {
		return nil
	}
	if !s.d.idleEnded(err, commit, time.Since(begun) >= engine.IdleTimeout(g, s.idle)) {
		return nil
	}
	return engine.IdleTimeoutErr(g, err)
}

// missingSchema reports whether err says the fence_tokens table does not exist.
func (s *Store) missingSchema(err error) bool { return s.d.missingTable(err, "fence_tokens") }

func (s *Store) raiseErr(g fence.Grant, err error) error {
	if s.missingSchema(err) {
		return fmt.Errorf("%w: raise fence row %q: %w", fence.ErrSchema, g.Resource(), err)
	}
	return fmt.Errorf("sqlfence: raise fence row %q to %d: %w", g.Resource(), g.Token(), err)
}

// keyErr wraps an error of the idempotency-key statements. busy still sees the
// driver's error through it.
func (s *Store) keyErr(op string, err error) error {
	if errors.Is(err, fence.ErrBusy) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if s.d.missingTable(err, "idempotency_keys") {
		return fmt.Errorf("%w: %s: %w", fence.ErrSchema, op, err)
	}
	return fmt.Errorf("sqlfence: %s: %w", op, err)
}
