package pgxfence_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver/benchpair"
)

// op is one write by worker w (its own row and resource), the i-th of that worker.
type op = benchpair.Op

// BenchmarkFenced compares, in one run against one server, each fenced write with its
// unfenced baseline at 16 and 64 concurrent workers:
//
//   - update: Store.Update (one conditional UPDATE) vs a plain UPDATE of the same row;
//   - tx: fence.Exec with one UPDATE vs pgx.BeginFunc with the same UPDATE, New's
//     default: BEGIN, the fence raise and the UPDATE in one round trip, then COMMIT;
//   - tx-same-grant: the same, each worker keeping one grant for all its
//     transactions (a job that writes several times under one lock): the stored
//     token already equals the grant's, and the raise only locks the fence row;
//   - tx-fence-first: the same as tx with WithFenceFirst (BEGIN and the raise in one round
//     trip before fn runs, then the UPDATE, then COMMIT);
//   - control: the plain UPDATE against itself, the noise floor of the run.
//
// Each worker writes its own row for its own resource (a lock serialises the writers
// of one resource anyway), each write with a fresh, higher token, as each job of a
// worker would hold a new grant. The variants alternate in 20 rounds (AB BA AB ...);
// b.N is the number of writes per variant per round. Reported: base_ops/s and
// fenced_ops/s over all rounds, and ratio, the median over rounds of fenced rate /
// base rate (the targets: >= 0.95 for update, >= 1.0 for tx).
func BenchmarkFenced(b *testing.B) {
	for _, workers := range []int{16, 64} {
		pool := benchPool(b, workers)
		s := newStore(pool)
		sf, err := pgxfence.New(pool, pgxfence.WithFenceFirst())
		if err != nil {
			b.Fatal(err)
		}
		res := resources(workers)
		// Per-worker op counters, kept across every run of the sub-benchmarks so
		// that each worker's tokens only rise.
		next := make([]int, workers)
		const upd = "UPDATE bench SET val = $1 WHERE id = $2"
		plainUpdate := func(ctx context.Context, w, i int) error {
			_, err := pool.Exec(ctx, upd, i, w)
			return err
		}
		fencedUpdate := func(ctx context.Context, w, i int) error {
			return s.Update(ctx, fence.NewGrant(res[w], fence.Token(i+1)),
				fence.Row{Table: "bench", Key: []fence.Col{{Name: "id", Value: w}}}, fence.Col{Name: "val", Value: i})
		}
		beginFunc := func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upd, i, w)
				return err
			})
		}
		fencedExec := func(ctx context.Context, w, i int) error {
			return fence.Exec(ctx, s, fence.NewGrant(res[w], fence.Token(i+1)), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upd, i, w)
				return err
			})
		}
		// A job that writes several times under one lock: each worker keeps its
		// grant (on a resource of its own, apart from the rising tokens above), and
		// only its first transaction raises the stored token.
		grants := make([]fence.Grant, workers)
		for w := range grants {
			grants[w] = fence.NewGrant(res[w]+"-held", 1)
		}
		sameGrantExec := func(ctx context.Context, w, i int) error {
			return fence.Exec(ctx, s, grants[w], func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upd, i, w)
				return err
			})
		}
		fenceFirstExec := func(ctx context.Context, w, i int) error {
			return fence.Exec(ctx, sf, fence.NewGrant(res[w], fence.Token(i+1)), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upd, i, w)
				return err
			})
		}
		if workers == 16 {
			// The noise floor: the plain UPDATE against itself.
			b.Run("control/workers=16", func(b *testing.B) {
				benchpair.Compare(b, next, plainUpdate, plainUpdate)
			})
		}
		b.Run(fmt.Sprintf("update/workers=%d", workers), func(b *testing.B) {
			benchpair.Compare(b, next, plainUpdate, fencedUpdate)
		})
		b.Run(fmt.Sprintf("tx/workers=%d", workers), func(b *testing.B) {
			benchpair.Compare(b, next, beginFunc, fencedExec)
		})
		b.Run(fmt.Sprintf("tx-same-grant/workers=%d", workers), func(b *testing.B) {
			benchpair.Compare(b, next, beginFunc, sameGrantExec)
		})
		b.Run(fmt.Sprintf("tx-fence-first/workers=%d", workers), func(b *testing.B) {
			benchpair.Compare(b, next, beginFunc, fenceFirstExec)
		})
	}
}

func resource(w int) string { return fmt.Sprintf("bench-%d", w) }

// resources names each worker's resource once, so that the fenced variants do not pay
// for formatting a name the baseline never needs (a job's grant comes from its lock).
func resources(workers int) []string {
	res := make([]string, workers)
	for w := range res {
		res[w] = resource(w)
	}
	return res
}

// benchPool returns a pool of workers connections on a migrated database holding one
// bench row per worker.
func benchPool(b *testing.B, workers int) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(newPool(b).Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = int32(workers), int32(workers)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	mustExec(b, pool, "CREATE TABLE bench (id INT PRIMARY KEY, val BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
	mustExec(b, pool, "INSERT INTO bench (id, val) SELECT g, 0 FROM generate_series(0, $1) AS g", workers-1)
	return pool
}

// BenchmarkFencedAlternatives measures other ways to fence a one-write transaction
// against pgx.BeginFunc, at 1 worker (round trips dominate) and 16 (the machine's CPU,
// shared with the server, dominates), to show why Fenced pipelines the raise with fn's
// first statement and raises with a plain upsert:
//
//   - store: Store.Fenced, New's default (BEGIN, the raise and the write in one pgx
//     batch, then COMMIT: two round trips);
//   - fence-first: Store.Fenced with WithFenceFirst (BEGIN and the raise in one pgx
//     batch, then the write, then COMMIT: three);
//   - separate-statement: BEGIN, then the raise as its own prepared statement (four);
//   - batch-function: BEGIN, SELECT fence_raise($1, $2) (the PL/pgSQL function of
//     migration 3) and the write in one hand-written batch, then COMMIT;
//   - batch-upsert: the same with the Store's raise statement (an upsert whose CASE
//     fails on a higher stored token), written by hand: the Store without its
//     client-side cost;
//   - batch-unfenced: BEGIN and the write in one batch, then COMMIT, with no fence at
//     all: what saving the round trip alone is worth, the ceiling of the batches.
func BenchmarkFencedAlternatives(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchAlternatives(b, workers) })
	}
}

func benchAlternatives(b *testing.B, workers int) {
	pool := benchPool(b, workers)
	s := newStore(pool)
	sf, err := pgxfence.New(pool, pgxfence.WithFenceFirst())
	if err != nil {
		b.Fatal(err)
	}
	res := resources(workers)
	next := make([]int, workers)
	const upd = "UPDATE bench SET val = $1 WHERE id = $2"
	beginFunc := func(ctx context.Context, w, i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, upd, i, w)
			return err
		})
	}
	write := func(ctx context.Context, w, i int) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, upd, i, w)
			return err
		}
	}
	// batch sends BEGIN, raise (when not empty) and the write in one batch, then
	// COMMIT.
	batch := func(raise string) op {
		return func(ctx context.Context, w, i int) error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			var batch pgx.Batch
			batch.Queue("BEGIN")
			if raise != "" {
				batch.Queue(raise, res[w], int64(i+1))
			}
			batch.Queue(upd, i, w)
			if err := c.SendBatch(ctx, &batch).Close(); err != nil {
				c.Exec(ctx, "ROLLBACK")
				return err
			}
			_, err = c.Exec(ctx, "COMMIT")
			return err
		}
	}
	variants := []struct {
		name string
		f    op
	}{
		{"store", func(ctx context.Context, w, i int) error {
			return s.Fenced(ctx, fence.NewGrant(res[w], fence.Token(i+1)), write(ctx, w, i))
		}},
		{"fence-first", func(ctx context.Context, w, i int) error {
			return sf.Fenced(ctx, fence.NewGrant(res[w], fence.Token(i+1)), write(ctx, w, i))
		}},
		{"separate-statement", func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, pgxfence.RaiseSQL, res[w], int64(i+1)); err != nil {
					return err
				}
				return write(ctx, w, i)(tx)
			})
		}},
		{"batch-function", batch("SELECT fence_raise($1, $2)")},
		{"batch-upsert", batch(pgxfence.RaiseSQL)},
		{"batch-unfenced", batch("")},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) { benchpair.Compare(b, next, beginFunc, v.f) })
	}
}

// BenchmarkUpdateRaise compares Update's two ways of raising the fence row, in one
// run: base is the upsert (INSERT ... ON CONFLICT DO UPDATE, which Update falls back
// to when the resource has no fence row), other the plain UPDATE Update tries first.
// Each operation presents a new token, so both raise.
func BenchmarkUpdateRaise(b *testing.B) {
	for _, workers := range []int{16, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			pool := benchPool(b, workers)
			res := resources(workers)
			next := make([]int, workers)
			form := func(bump bool) op {
				q, err := pgxfence.UpdateSQL(fence.Row{Table: "bench", Key: []fence.Col{{Name: "id", Value: 0}}}, []fence.Col{{Name: "val", Value: 0}}, bump)
				if err != nil {
					b.Fatal(err)
				}
				return func(ctx context.Context, w, i int) error {
					// Both forms write: base presents tokens 2, 4, ...; other 3, 5, ...
					tok := int64(2*i + 2)
					if bump {
						tok++
					}
					tag, err := pool.Exec(ctx, q, res[w], tok, i, w)
					if err == nil && tag.RowsAffected() != 1 {
						err = fmt.Errorf("worker %d: %d rows written", w, tag.RowsAffected())
					}
					return err
				}
			}
			benchpair.Compare(b, next, form(false), form(true))
		})
	}
}

// BenchmarkUpdateSameGrant is Store.Update against the plain UPDATE where each worker
// holds one grant for all its writes (the common case: a holder writing many rows
// under one token), so the fence row is locked but not rewritten.
func BenchmarkUpdateSameGrant(b *testing.B) {
	for _, workers := range []int{16, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			pool := benchPool(b, workers)
			s := newStore(pool)
			res := resources(workers)
			next := make([]int, workers)
			const upd = "UPDATE bench SET val = $1 WHERE id = $2"
			plain := func(ctx context.Context, w, i int) error {
				_, err := pool.Exec(ctx, upd, i, w)
				return err
			}
			fenced := func(ctx context.Context, w, i int) error {
				return s.Update(ctx, fence.NewGrant(res[w], 1), fence.Row{Table: "bench", Key: []fence.Col{{Name: "id", Value: w}}}, fence.Col{Name: "val", Value: i})
			}
			benchpair.Compare(b, next, plain, fenced)
		})
	}
}
