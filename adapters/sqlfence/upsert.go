package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// Upsert is fence's single-row Upsert, in a transaction that raises the fence row;
// r.Key must be a primary key or unique index. MySQL: ON DUPLICATE KEY UPDATE, every
// column guarded by the old token and the key, so a clash on another unique key is a
// *nolock.DuplicateError that changes no other row. Errors are those of Update.
func (s *Store) Upsert(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) (err error) {
	defer s.observe("upsert", &err)
	st, err := s.prepare(ctx, g, r, set, false)
	if err != nil {
		return err
	}
	cols := slices.Concat(st.Keys, st.Set, []string{st.Token})
	q := s.d.rebind("INSERT INTO " + st.Table + " (" + strings.Join(cols, ", ") + ") VALUES (" + marks(len(cols)) + ")" + s.d.upsertTail(st))
	args := slices.Concat(st.KeyVals, st.SetVals, []any{int64(st.g.Token())})
	return s.failed(st, "upsert", s.writeTx(ctx, "upsert", st.g, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if check, err := s.d.upserted(res); err != nil || !check {
			return err
		}
		stored, found, err := s.stored(ctx, tx, st)
		switch {
		case err != nil:
			return err
		case found && stored == st.g.Token():
			return nil // MySQL: an AUTO_INCREMENT id, not a refusal
		case found && stored > st.g.Token():
			return stale(st.g, stored)
		}
		// MySQL only: the insert hit another unique key and the guarded update left
		// that row alone.
		return &nolock.DuplicateError{Table: r.Table,
			Err: errors.New("sqlfence: upsert clashed with a unique key other than the row's key")}
	}))
}

// Delete is fence's single-row Delete, in a transaction that raises the fence row
// (the tombstone a stale Upsert meets). Errors are those of Update.
func (s *Store) Delete(ctx context.Context, g fence.Grant, r fence.Row) (err error) {
	defer s.observe("delete", &err)
	st, err := s.prepare(ctx, g, r, nil, false)
	if err != nil {
		return err
	}
	q := s.d.rebind("DELETE FROM " + st.Table + " WHERE " + st.where + " AND " + st.Token + " <= ?")
	args := slices.Concat(st.KeyVals, []any{int64(st.g.Token())})
	return s.failed(st, "delete", s.writeTx(ctx, "delete", st.g, func(tx *sql.Tx) error {
		switch n, err := affected(tx.ExecContext(ctx, q, args...)); {
		case err != nil:
			return err
		case n > 1:
			return fmt.Errorf("%w: the key of %q picks %d rows, not one; nothing was deleted", fence.ErrInvalidArgument, r.Table, n)
		case n == 0:
			return s.refused(ctx, tx, st)
		}
		return nil
	}))
}

// onConflictTail is the upsert clause of PostgreSQL and SQLite: ON CONFLICT on the
// key, the row updated unless its token, old (as the database names the existing
// row's column), is higher.
func onConflictTail(st *rowStmt, old string) string {
	var b strings.Builder
	b.WriteString(" ON CONFLICT (" + strings.Join(st.Keys, ", ") + ") DO UPDATE SET ")
	for _, c := range st.Set {
		b.WriteString(c + " = excluded." + c + ", ")
	}
	b.WriteString(st.Token + " = excluded." + st.Token + " WHERE " + old + " <= excluded." + st.Token)
	return b.String()
}
