package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// onConflictRaise ends a fence-row INSERT on SQLite: raised unless a higher token is
// stored; the row count says how many were.
const onConflictRaise = " ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = CURRENT_TIMESTAMP " +
	"WHERE fence_tokens.token <= excluded.token"

// raiseSet raises a fence.Set's rows with one upsert that never lowers a row, locking
// them in sorted order (grant.Checked.Resources); a *fence.StaleError names the first holding
// a higher token, looked up unless the row count says every row was raised.
func (s *Store) raiseSet(ctx context.Context, tx *sql.Tx, g *grant.Checked) error {
	res := g.Resources()
	tok := int64(g.Token())
	args := make([]any, 0, 2*len(res))
	for _, r := range res {
		args = append(args, r, tok)
	}
	tail, counts := s.d.raiseSetTail()
	q := "INSERT INTO fence_tokens (resource, token) VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?), ", len(res)), ", ") + tail
	r, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return s.raiseErr(g, err)
	}
	if counts {
		if n, err := r.RowsAffected(); err == nil && n == int64(len(res)) {
			return nil
		}
	}
	// The lookup's arguments, in args' place: the resources, then the token.
	for i := range res {
		args[i] = args[2*i]
	}
	args = append(args[:len(res)], tok)
	q = "SELECT resource, token FROM fence_tokens WHERE resource IN (" + marks(len(res)) + ") AND token > ? ORDER BY resource LIMIT 1"
	var higher string
	var seen int64
	switch err := tx.QueryRowContext(ctx, s.d.rebind(q), args...).Scan(&higher, &seen); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("sqlfence: read fence rows of a grant set: %w", err)
	}
	return &fence.StaleError{Resource: higher, Presented: g.Token(), Seen: fence.Token(seen)}
}
