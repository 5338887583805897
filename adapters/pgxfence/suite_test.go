package pgxfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/tests/fencetest"
)

// TestSuite runs the adapter-independent suite (GC-pause timeline, 50-writer race,
// blocked stale transaction, token-column writes, hostile identifiers) on a pool, with
// the fence pipelined with fn's first statement (the default) and raised first.
func TestSuite(t *testing.T) {
	pool := newPool(t)
	for _, first := range []bool{false, true} {
		name, store := "pipelined", newStore(pool)
		if first {
			name, store = "fence-first", fenceFirstStore(t, pool)
		}
		exec, query := onPool(pool)
		t.Run(name, func(t *testing.T) {
			fencetest.Run(t, fencetest.Harness[pgx.Tx]{
				Name:     "pgxfence/" + name,
				Store:    store,
				Exec:     exec,
				QueryInt: query,
				TxExec:   suiteExec[pgx.Tx],
				TxQueryInt: func(ctx context.Context, tx pgx.Tx, q string, args ...any) (int64, error) {
					return queryInt(ctx, tx, q, args...)
				},
				FenceFirst: first,
			})
		})
	}
}
