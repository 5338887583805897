package pgxfence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/pgsql"
	"github.com/fencegate/fencegate/nolock"
)

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// refusal is Fenced's error for one of the raise or COMMIT; lookup, if not nil, is an
// idle connection to read the stored token on after a serialization failure.
func refusal(ctx context.Context, g fence.Grant, err error, lookup querier) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Code == pgsql.Serialization && lookup != nil {
			if seen, lerr := storedToken(ctx, lookup, g.Resource()); lerr == nil && seen > g.Token() {
				return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
			}
		}
		if e := pgsql.Refusal(g, pgErr.Code, pgErr.Message, err); e != nil {
			return e
		}
	}
	return fmt.Errorf("pgxfence: fenced transaction for %q: %w", g.Resource(), poolerHint(err))
}

// fnErr is fn's err, wrapped in fence.ErrIdleTimeout if the server ended the
// transaction for idling (25P03).
func fnErr(g fence.Grant, err error) error {
	var pgErr *pgconn.PgError
	if err != nil && !errors.Is(err, fence.ErrIdleTimeout) && errors.As(err, &pgErr) && pgErr.Code == pgsql.IdleTimeout {
		return grant.IdleTimeoutErr(g, err)
	}
	return err
}

func storedToken(ctx context.Context, q querier, resource string) (fence.Token, error) {
	var t int64
	err := q.QueryRow(ctx, pgsql.MarkSQL, poolerMode, resource).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return fence.Token(t), err
}

// writeError maps a single-row write's error: a unique violation to a
// *nolock.DuplicateError, a missing table or unique index to a clear message.
func writeError(op, table string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgsql.Unique:
			return &nolock.DuplicateError{Table: table, Constraint: pgErr.ConstraintName, Err: err}
		case pgsql.NoConstraint:
			return fmt.Errorf("pgxfence: %s %q: the key columns must be exactly a primary key or unique index: %w", op, table, err)
		case pgsql.NoTable:
			if strings.Contains(pgErr.Message, "fence_tokens") {
				return fmt.Errorf("%w: %w", fence.ErrSchema, err)
			}
		}
	}
	return fmt.Errorf("pgxfence: %s %q: %w", op, table, poolerHint(err))
}

// rowError is writeError for a token-column write on r: a missing token column
// (42703) is fence.ErrSchema naming the migration that adds it.
func rowError(op string, r fence.Row, err error) error {
	var pgErr *pgconn.PgError
	tok := cmp.Or(r.TokenColumn, fence.DefaultTokenColumn)
	if errors.As(err, &pgErr) && pgErr.Code == pgsql.NoColumn && strings.Contains(pgErr.Message, `"`+tok+`"`) {
		return dialect.NoTokenColumn(dialect.Postgres, "pgxfence", op, r.Table, tok, err)
	}
	return writeError(op, r.Table, err)
}

// replyLost reports whether err, of a COMMIT or a single-row write outside a
// transaction, leaves the outcome unknown: server replies as pgsql.ReplyLost says;
// pgx's errors from before sending (SafeToRetry, connect, closed pool, ctx) decide it.
func replyLost(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgsql.ReplyLost(pgErr.Code, cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity))
	}
	var connectErr *pgconn.ConnectError
	switch {
	case pgconn.SafeToRetry(err), errors.As(err, &connectErr),
		errors.Is(err, pgx.ErrTxClosed), errors.Is(err, pgx.ErrTxCommitRollback),
		errors.Is(err, puddle.ErrClosedPool),
		// Unwrapped: ctx ended while the pool waited for a connection (pgconn wraps
		// the one that ends a statement in flight).
		err == context.Canceled, err == context.DeadlineExceeded:
		return false
	}
	return true
}

// commit commits tx: fence.ErrCommitUnknown when COMMIT may have applied unanswered.
// pgx marks "conn closed" safe to retry even when COMMIT went out: a connection open
// before COMMIT and closed after is unknown too, and so is a ctx cancelled meanwhile.
func commit(ctx context.Context, tx pgx.Tx, g fence.Grant) error {
	open := !tx.Conn().IsClosed()
	err := tx.Commit(ctx)
	// pgconn returns a bare context.Canceled when ctx ends after COMMIT went out (one
	// that ended before is wrapped, and safe to retry); replyLost cannot tell it from a
	// pool's wait for a connection, which a COMMIT never has.
	if err != nil && (open && (errors.Is(err, pgconn.ErrConnClosed) || err == context.Canceled) || replyLost(err)) {
		return grant.CommitUnknown(g, "commit", err)
	}
	return err
}

// unknownOutcome is fence.ErrCommitUnknown for a single-row write's lost reply, else
// nil; never on a caller's pgx.Tx, where the loss only ends the caller's transaction.
func (s *Store) unknownOutcome(op string, g fence.Grant, err error) error {
	if s.nested || !replyLost(err) {
		return nil
	}
	return grant.CommitUnknown(g, op, err)
}
