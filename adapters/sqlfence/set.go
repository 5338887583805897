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

// raiseSet raises the fence row of every resource of a fence.Set grant inside tx, in
// sorted order (engine.Resources), with one multi-row upsert that never lowers a row
// and so locks every row in that order, then refuses the whole set with a
// *fence.StaleError naming the first resource that holds a higher token. PostgreSQL
// and SQLite report how many rows the upsert raised, so the lookup runs only when one
// was not; MySQL counts a row left as it was as found (clientFoundRows), so it always
// looks: two statements for a set of any size.
func (s *Store) raiseSet(ctx context.Context, tx *sql.Tx, g fence.Grant) error {
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
	if s.d.Dialect == dMySQL {
		b.WriteString(" ON DUPLICATE KEY UPDATE updated_at = IF(token <= VALUES(token), CURRENT_TIMESTAMP(6), updated_at), " +
			"token = GREATEST(token, VALUES(token))")
	} else {
		b.WriteString(" ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = CURRENT_TIMESTAMP " +
			"WHERE fence_tokens.token <= excluded.token")
	}
	r, err := tx.ExecContext(ctx, s.d.rebind(b.String()), args...)
	if err != nil {
		return raiseErr(g, err)
	}
	if s.d.Dialect != dMySQL {
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
