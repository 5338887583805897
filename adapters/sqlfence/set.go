package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// raiseSet raises a fence.Set's rows with one upsert that never lowers a row, locking
// them in sorted order (grant.Checked.Resources); a *fence.StaleError names the first
// holding a higher token, looked up (higher) unless the row count says every row was
// raised (counts). raise and higher are the dialect's, over the set's resources.
func (s *Store) raiseSet(ctx context.Context, tx *sql.Tx, g *grant.Checked, raise, higher string, counts bool) error {
	res := g.Resources()
	tok := int64(g.Token())
	args := make([]any, 0, 2*len(res))
	for _, r := range res {
		args = append(args, r, tok)
	}
	r, err := tx.ExecContext(ctx, raise, args...)
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
	var first string
	var seen int64
	switch err := tx.QueryRowContext(ctx, higher, args...).Scan(&first, &seen); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("sqlfence: read fence rows of a grant set: %w", err)
	}
	return &fence.StaleError{Resource: first, Presented: g.Token(), Seen: fence.Token(seen)}
}
