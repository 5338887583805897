package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/nolock"
)

// Decrement is nolock's guarded take (see the nolock package doc) in one statement
// outside any transaction; MySQL returns the new value through LAST_INSERT_ID,
// SQLite and PostgreSQL through RETURNING. On SQLite and MySQL a counter shape is
// prepared once per pooled connection: keep connections in the pool
// (SetMaxIdleConns). fence.ErrBusy when SQLite stayed locked until ctx ended.
func (s *Store) Decrement(ctx context.Context, c nolock.Counter, n int64) (int64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	args, err := nolockpath.TakeArgs(c, n)
	if err != nil {
		return 0, err
	}
	sh, err := s.shapeOf(ctx, c)
	if err != nil {
		return 0, err
	}
	take := func(args []any) (int64, bool, error) {
		// The common case runs without the retry closure: on SQLite, where a take
		// is cheap, every allocation shows.
		left, took, err := s.take(ctx, sh, args)
		if err != nil && s.d.busy(err) {
			left, took, err = s.retryTake(ctx, sh, args)
		}
		return left, took, s.wrap(err, "decrement", c.Table, "")
	}
	look := func(keyArgs []any) (int64, bool, error) {
		switch left, err := s.look(ctx, sh, keyArgs); {
		case errors.Is(err, sql.ErrNoRows):
			return 0, false, nil
		case err != nil:
			return 0, false, s.wrap(err, "decrement: look up", c.Table, "")
		default:
			return left, true, nil
		}
	}
	return nolockpath.Decrement(c, n, args, take, look)
}

// retryTake is take retried while busy, apart from Decrement so that the closure's
// variables do not move Decrement's to the heap on every call.
func (s *Store) retryTake(ctx context.Context, sh *shape, args []any) (left int64, took bool, err error) {
	err = s.retry(ctx, func() (err error) {
		left, took, err = s.take(ctx, sh, args)
		return err
	})
	return left, took, err
}

// look reads the counter after a take that changed nothing.
func (s *Store) look(ctx context.Context, sh *shape, keyArgs []any) (left int64, err error) {
	err = s.retry(ctx, func() error { return s.db.QueryRowContext(ctx, sh.look, keyArgs...).Scan(&left) })
	return left, err
}

func (s *Store) take(ctx context.Context, sh *shape, args []any) (left int64, took bool, err error) {
	left, took, err = s.d.take(ctx, s.db, sh, args)
	runtime.KeepAlive(s) // the cleanup that closes sh.stmt waits for s to be unreachable
	return left, took, err
}

// Insert is nolock's unique-key insert: one INSERT, names quoted, values as
// arguments. A *nolock.DuplicateError names the index (MySQL) or the columns
// (SQLite, "t.a, t.b") and wraps the driver's error. fence.ErrBusy when SQLite stayed
// locked until ctx ended.
func (s *Store) Insert(ctx context.Context, table string, cols ...fence.Col) error {
	if err := s.usable(); err != nil {
		return err
	}
	qt, names, err := dialect.CheckInsert(s.d.dialect(), table, cols)
	if err != nil {
		return err
	}
	args := make([]any, len(cols))
	for i, c := range cols {
		args[i] = c.Value
	}
	q := s.d.rebind("INSERT INTO " + qt + " (" + strings.Join(names, ", ") + ") VALUES (" + marks(len(cols)) + ")")
	err = s.retry(ctx, func() error {
		_, err := s.db.ExecContext(ctx, q, args...)
		return err
	})
	if err == nil {
		return nil
	}
	if de := s.d.duplicate(err, table); de != nil {
		return de
	}
	return fmt.Errorf("sqlfence: insert into %q: %w", table, err)
}
