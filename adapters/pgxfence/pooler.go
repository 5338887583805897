package pgxfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/internal/pgsql"
)

// WithPooler makes the Store's own statements work through a transaction pooler
// (PgBouncer's pool_mode = transaction), whatever the pool's exec mode: BEGIN and the
// raise go as one simple-protocol query with the grant's values as literals, every
// other statement of the Store in QueryExecModeCacheDescribe (unnamed statements, no
// server-side name to miss on the next server connection). fn's Exec, Query and
// QueryRow (Fenced's and Once's) get the same mode unless they name one. Fenced then
// takes one round trip more (the raise no longer travels with fn's first statement).
// fn's SendBatch, Prepare and CopyFrom use the pool's mode: under a pooler that must
// be cache_describe, exec or simple_protocol.
func WithPooler() Option {
	return func(s *Store) error {
		s.pooler = true
		return nil
	}
}

// poolerMode is the exec mode of the Store's statements under WithPooler.
const poolerMode = pgx.QueryExecModeCacheDescribe

// mode returns args for one of the Store's statements: unchanged by default, led by
// poolerMode under WithPooler, by ownMode on a DB in describe_exec. describe_exec
// describes an unnamed statement in one round trip and runs it in the next: behind a
// transaction pooler, outside a transaction, the next may reach another server
// connection and bind the write's values to another client's unnamed statement.
// cache_describe and exec parse, bind and run in one round trip.
func (s *Store) mode(args []any) []any {
	switch {
	case s.pooler:
		return append([]any{poolerMode}, args...)
	case s.ownMode != nil:
		return append(s.ownMode[:1:1], args...)
	}
	return args
}

// ownMode is nil, or for a DB in describe_exec the mode of the Store's statements:
// cache_describe, or exec where the description cache is off.
func ownMode(cfg *pgx.ConnConfig) []any {
	switch {
	case cfg.DefaultQueryExecMode != pgx.QueryExecModeDescribeExec:
		return nil
	case cfg.DescriptionCacheCapacity == 0:
		return []any{pgx.QueryExecModeExec}
	}
	return []any{poolerMode}
}

// fnMode is mode for fn's statement: args that already name an exec mode keep it.
func (s *Store) fnMode(args []any) []any {
	if !s.pooler {
		return args
	}
	for _, a := range args {
		switch a.(type) {
		case pgx.QueryExecMode:
			return args
		case pgx.QueryResultFormats, pgx.QueryResultFormatsByOID, pgx.QueryRewriter:
		default:
			return s.mode(args)
		}
	}
	return s.mode(args)
}

// fnTx is tx as fn gets it outside Fenced's own transaction (Once, a savepoint of a
// caller's pgx.Tx): under WithPooler a pooledTx, else tx.
func (s *Store) fnTx(tx pgx.Tx) pgx.Tx {
	if !s.pooler {
		return tx
	}
	return pooledTx{Tx: tx, s: s}
}

// pooledTx sends fn's Exec, Query and QueryRow in poolerMode unless they name a mode,
// as Fenced's pgx.Tx does; a savepoint it begins does the same.
type pooledTx struct {
	pgx.Tx
	s *Store
}

func (t pooledTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pooledTx{Tx: tx, s: t.s}, nil
}

func (t pooledTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.Tx.Exec(ctx, sql, t.s.fnMode(args)...)
}

func (t pooledTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.Tx.Query(ctx, sql, t.s.fnMode(args)...)
}

func (t pooledTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.Tx.QueryRow(ctx, sql, t.s.fnMode(args)...)
}

// beginPooled begins t's transaction for WithPooler: BEGIN and the raise in one
// simple-protocol query, nothing prepared. A refused raise is rolled back at once.
func (t *lazyTx) beginPooled(ctx context.Context) error {
	raise, err := pgsql.RaiseLiteral(t.g, t.s.set.IdleMS(t.g))
	if err != nil {
		t.refused = fmt.Errorf("pgxfence: fenced transaction for %q: %w", t.g.Resource(), err)
		return t.refused
	}
	tx, err := t.conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: t.s.beginSQL + "; " + raise})
	if err == nil {
		t.tx = tx
		return nil
	}
	var lookup querier
	if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() != 'I' {
		if _, rbErr := t.conn.Exec(ctx, "ROLLBACK"); rbErr != nil {
			t.refused = errors.Join(refusal(ctx, t.g, err, nil), fmt.Errorf("pgxfence: rollback: %w", rbErr))
			return t.refused
		}
	}
	if !t.conn.IsClosed() && t.conn.PgConn().TxStatus() == 'I' {
		lookup = t.conn
	}
	t.refused = refusal(ctx, t.g, err, lookup)
	return t.refused
}

// poolerHint adds the fix to err when it says a named or unnamed prepared statement
// was missing or already there (42P05, 26000): a transaction pooler handed the
// session's statements to another server connection.
func poolerHint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") {
		return fmt.Errorf("%w (behind a transaction pooler such as PgBouncer? give New pgxfence.WithPooler(), "+
			"or use exec mode cache_describe, exec or simple_protocol)", err)
	}
	return err
}
