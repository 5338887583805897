package sqlfence

import (
	"context"
	"database/sql"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// raisePostgres raises g's fence row with PostgreSQL's one raise, the statement
// pgxfence sends too (internal/engine): it inserts or raises the row, locks it to
// commit and bounds the transaction's idle time, in one statement. A refusal aborts
// the transaction (the caller rolls it back) and names the stored token.
func (s *Store) raisePostgres(ctx context.Context, tx *sql.Tx, g fence.Grant) error {
	_, err := tx.ExecContext(ctx, engine.PGRaiseIdleSQL, g.Resource(), int64(g.Token()), s.idleMS(g))
	if err == nil {
		return nil
	}
	if sqlState(err) == "22P02" {
		if seen, _, ok := engine.PGMarkedStale(err.Error()); ok {
			return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
		}
	}
	return raiseErr(g, err)
}
