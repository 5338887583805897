package scenario_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/scenario"
)

// permitConfig: each worker takes one of 3 permits of "exports", writes its
// slot's row through the fenced store (the slot is the resource), reaches
// "holding" and releases.
func permitConfig() scenario.Config {
	return scenario.Config{
		Workers:     []string{"a", "b", "c", "d", "e"},
		StoreServer: postgres,
		Setup:       totalsSetupPG,
		Job: func(ctx context.Context, w *scenario.Worker) error {
			dsn, err := w.StoreDSN(w.Data())
			if err != nil {
				return err
			}
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return err
			}
			defer pool.Close()
			store, err := pgxfence.New(pool)
			if err != nil {
				return err
			}
			p, err := w.AcquirePermit(ctx, "exports", 3)
			if err != nil {
				return err
			}
			defer p.Release(context.WithoutCancel(ctx))
			err = fence.Exec(ctx, scenario.Store(w, store), p, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upsertTotalPG, p.Resource(), 1, p.Token())
				return err
			})
			if err != nil {
				return err
			}
			return w.Reach(ctx, "holding")
		},
		Read: readAllTokens,
	}
}

// TestRun_permits: 3 permits, 5 workers. a takes slot 0 and freezes with its
// write in flight; b and c take slots 1 and 2 and hold them; d waits, and takes
// a's slot once a's lease has expired, and writes; e starts then; b and c crash
// holding their permits. a's write reaches the store after d's and is refused on
// the slot; no grant ever finds more than 3 permits held.
func TestRun_permits(t *testing.T) {
	t.Parallel() // a run mostly waits out a lease
	h := scenario.Run(t, permitConfig(),
		scenario.Start("a"),
		scenario.Freeze("a").When("a", scenario.OnTheWire).Until("e", scenario.Finished),
		scenario.Start("b"),
		scenario.Start("c").When("b", scenario.Granted),
		scenario.Start("d").When("c", scenario.Granted),
		scenario.Start("e").When("d", scenario.Wrote),
		scenario.Kill("b").When("b", "holding"),
		scenario.Kill("c").When("c", "holding"),
	)
	t.Logf("timelines:\n%s", h.Timelines())
	slot := map[string]string{}
	for _, g := range h.Grants {
		if g.Permit != "exports" || g.Permits != 3 || g.Holders < 1 || g.Holders > 3 || !strings.HasPrefix(g.Resource, "exports/") {
			t.Errorf("grant %+v: want a permit of exports (3) with 1 to 3 held", g)
		}
		slot[g.Worker] = g.Resource
	}
	if a, d := writeOf(t, h, "a"), writeOf(t, h, "d"); len(h.Grants) != 5 || slot["d"] != slot["a"] || a.Outcome == scenario.Acknowledged || d.Token <= a.Token {
		t.Fatalf("grants %+v; a's write %+v, d's %+v: want d granted a's slot and a's write refused", h.Grants, a, d)
	}
}

// readAllTokens returns every row's token, by account (a permit's slot).
func readAllTokens(ctx context.Context, dsn string) (map[string]string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT account, token FROM totals`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var account string
		var tok int64
		if err := rows.Scan(&account, &tok); err != nil {
			return nil, err
		}
		out[account] = strconv.FormatInt(tok, 10)
	}
	return out, rows.Err()
}
