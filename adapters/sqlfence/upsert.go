package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	g = st.g
	cols := append(append(append([]string{}, st.Keys...), st.Set...), st.Token)
	q := s.d.rebind("INSERT INTO " + st.Table + " (" + strings.Join(cols, ", ") + ") VALUES (" +
		strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")" +
		s.d.upsertTail(st))
	args := append(append(append([]any{}, st.KeyVals...), st.SetVals...), int64(g.Token()))

	err = s.writeTx(ctx, "upsert", st.g, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		check, err := s.d.upserted(res)
		if err != nil || !check {
			return err
		}
		stored, found, err := s.stored(ctx, tx, st)
		switch {
		case err != nil:
			return err
		case found && stored == g.Token():
			return nil // MySQL: an AUTO_INCREMENT id, not a refusal
		case found && stored > g.Token():
			return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: stored}
		}
		// MySQL only: the insert hit another unique key and the guarded update left
		// that row alone.
		return &nolock.DuplicateError{Table: r.Table,
			Err: errors.New("sqlfence: upsert clashed with a unique key other than the row's key")}
	})
	if err != nil {
		return s.failed(st, "upsert", err)
	}
	return nil
}

// Delete is fence's single-row Delete, in a transaction that raises the fence row
// (the tombstone a stale Upsert meets). Errors are those of Update.
func (s *Store) Delete(ctx context.Context, g fence.Grant, r fence.Row) (err error) {
	defer s.observe("delete", &err)
	st, err := s.prepare(ctx, g, r, nil, false)
	if err != nil {
		return err
	}
	g = st.g
	q := s.d.rebind("DELETE FROM " + st.Table + " WHERE " + st.where + " AND " + st.Token + " <= ?")
	args := append(append([]any{}, st.KeyVals...), int64(g.Token()))
	err = s.writeTx(ctx, "delete", st.g, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		switch {
		case err != nil:
			return err
		case n == 1:
			return nil
		case n > 1:
			return fmt.Errorf("%w: the key of %q picks %d rows, not one; nothing was deleted", fence.ErrInvalidArgument, r.Table, n)
		}
		return s.refused(ctx, tx, st)
	})
	if err != nil {
		return s.failed(st, "delete", err)
	}
	return nil
}

// onConflictTail is the upsert clause of PostgreSQL and SQLite: ON CONFLICT on the
// key columns, the row updated only if its token, old (as the database names the
// existing row's column), is not higher.
func onConflictTail(st *rowStmt, old string) string {
	var b strings.Builder
	b.WriteString(" ON CONFLICT (" + strings.Join(st.Keys, ", ") + ") DO UPDATE SET ")
	for _, c := range st.Set {
		b.WriteString(c + " = excluded." + c + ", ")
	}
	b.WriteString(st.Token + " = excluded." + st.Token + " WHERE " + old + " <= excluded." + st.Token)
	return b.String()
}

// rowsNone reports that a statement changed no row.
func rowsNone(res sql.Result) (bool, error) {
	n, err := res.RowsAffected()
	return n == 0, err
}
