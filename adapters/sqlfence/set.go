package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// onConflictRaise ends an INSERT of fence rows on PostgreSQL and SQLite: a row is
// raised unless a higher token is stored, and its row count says how many were.
const onConflictRaise = " ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = CURRENT_TIMESTAMP " +
	"WHERE fence_tokens.token <= excluded.token"

// raiseSet raises the fence row of every resource of a fence.Set grant inside tx, in
// sorted order (engine.Resources), with one multi-row upsert that never lowers a row
// and so locks every row in that order, then refuses the whole set with a
// *fence.StaleError naming the first resource that holds a higher token. Where the
// upsert's row count says every row was raised (countsRaised) the lookup is skipped;
// otherwise two statements for a set of any size.
func (s *Store) raiseSet(ctx context.Context, tx *sql.Tx, g *engine.Checked) error {
	res := engine.Resources(g)
	tok := int64(g.Token())
	var b strings.Builder
	b.WriteString("INSERT INTO fence_tokens (resource, token) VALUES ")
	args := make([]any, 0, 2*len(res)+1)
	for i, r := range res {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?)")
		args = append(args, r, tok)
	}
	b.WriteString(s.d.raiseSetTail())
	r, err := tx.ExecContext(ctx, s.d.rebind(b.String()), args...)
	if err != nil {
		return s.raiseErr(g, err)
	}
	if s.d.countsRaised() {
		if n, err := r.RowsAffected(); err == nil && n == int64(len(res)) {
			return nil
		}
	}
	q := "SELECT resource, token FROM fence_tokens WHERE resource IN (" +
		strings.TrimSuffix(strings.Repeat("?, ", len(res)), ", ") + ") AND token > ? ORDER BY resource LIMIT 1"
	var (
		higher string
		seen   int64
	)
	err = tx.QueryRowContext(ctx, s.d.rebind(q), anySlice(res, tok)...).Scan(&higher, &seen)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("sqlfence: read fence rows of a grant set: %w", err)
	}
	return &fence.StaleError{Resource: higher, Presented: g.Token(), Seen: fence.Token(seen)}
}

// anySlice returns res followed by tok, as query arguments.
func anySlice(res []string, tok int64) []any {
	out := make([]any, 0, len(res)+1)
	for _, r := range res {
		out = append(out, r)
	}
	return append(out, tok)
}
