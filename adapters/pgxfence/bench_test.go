package pgxfence_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/benchpair"
)

// op is one write by worker w (its own row and resource), the i-th of that worker.
type op = benchpair.Op

// BenchmarkFenced compares, in one run against one server, each fenced write with its
// unfenced baseline at 16 and 64 concurrent workers:
//
//   - update: Store.Update (one conditional UPDATE) vs a plain UPDATE of the same row;
//   - tx: fence.Exec with one UPDATE vs pgx.BeginFunc with the same UPDATE, the
//     fence raised before fn runs (New's default);
//   - tx-pipelined: the same with WithPipelinedFence (BEGIN, the raise and the
//     UPDATE in one round trip);
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
		s := pgxfence.New(pool)
		sp, err := pgxfence.NewWithOptions(pool, pgxfence.WithPipelinedFence())
		if err != nil {
			b.Fatal(err)
		}
		// Per-worker op counters, kept across every run of the sub-benchmarks so
		// that each worker's tokens only rise.
		next := make([]int, workers)
		const upd = "UPDATE bench SET val = $1 WHERE id = $2"
		plainUpdate := func(ctx context.Context, w, i int) error {
			_, err := pool.Exec(ctx, upd, i, w)
			return err
		}
		fencedUpdate := func(ctx context.Context, w, i int) error {
			return s.Update(ctx, fence.NewGrant(resource(w), fence.Token(i+1)),
				fence.Row{Table: "bench", Key: []fence.Col{fence.C("id", w)}}, fence.C("val", i))
		}
		beginFunc := func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upd, i, w)
				return err
			})
		}
		fencedExec := func(ctx context.Context, w, i int) error {
			return fence.Exec(ctx, s, fence.NewGrant(resource(w), fence.Token(i+1)), func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, upd, i, w)
				return err
			})
		}
		pipelinedExec := func(ctx context.Context, w, i int) error {
			return fence.Exec(ctx, sp, fence.NewGrant(resource(w), fence.Token(i+1)), func(tx pgx.Tx) error {
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
		b.Run(fmt.Sprintf("tx-pipelined/workers=%d", workers), func(b *testing.B) {
			benchpair.Compare(b, next, beginFunc, pipelinedExec)
		})
	}
}

func resource(w int) string { return fmt.Sprintf("bench-%d", w) }

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
// against pgx.BeginFunc, hand-written, at 1 worker (round trips dominate) and 16
// (the machine's CPU, shared with the server, dominates), to show why Fenced sends
// BEGIN and fence_raise in one simple-protocol message:
//
//   - fenced: Store.Fenced (BEGIN; SELECT fence_raise(...), one round trip, then fn);
//   - inline-cte: the same round trip with the raise as an inline CTE statement
//     instead of the function (planned on every call: the simple protocol has no
//     prepared statements);
//   - separate-statement: BEGIN, then the raise as its own prepared statement (one
//     round trip more);
//   - pipelined-first-write: BEGIN, the raise (an inline upsert) and the
//     transaction's first write in one hand-written pgx batch (one round trip fewer
//     than BeginFunc; the function runs before the fence is known to hold);
//   - pipelined-store: Store.Fenced with WithPipelinedFence, the same round trips
//     through pgxfence's lazily begun transaction;
//   - pipelined-unfenced: BEGIN and the write in one batch, then COMMIT, with no fence
//     at all: what saving the round trip alone is worth, the ceiling of the two above.
func BenchmarkFencedAlternatives(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) { benchAlternatives(b, workers) })
	}
}

func benchAlternatives(b *testing.B, workers int) {
	pool := benchPool(b, workers)
	s := pgxfence.New(pool)
	sp, err := pgxfence.NewWithOptions(pool, pgxfence.WithPipelinedFence())
	if err != nil {
		b.Fatal(err)
	}
	next := make([]int, workers)
	const upd = "UPDATE bench SET val = $1 WHERE id = $2"
	const raise = "INSERT INTO fence_tokens AS ft (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE ft.token <= EXCLUDED.token RETURNING token"
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
	variants := []struct {
		name string
		f    op
	}{
		{"fenced", func(ctx context.Context, w, i int) error {
			return s.Fenced(ctx, fence.NewGrant(resource(w), fence.Token(i+1)), write(ctx, w, i))
		}},
		{"inline-cte", func(ctx context.Context, w, i int) error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			begin := fmt.Sprintf("BEGIN; WITH f AS (INSERT INTO fence_tokens AS ft (resource, token) VALUES ('%s', %d) "+
				"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE ft.token <= EXCLUDED.token RETURNING 1) "+
				"SELECT 1 / count(*) FROM f", resource(w), i+1)
			tx, err := c.Conn().BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
			if err != nil {
				return err
			}
			if err := write(ctx, w, i)(tx); err != nil {
				tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}},
		{"separate-statement", func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var stored int64
				if err := tx.QueryRow(ctx, raise, resource(w), i+1).Scan(&stored); err != nil {
					return err
				}
				return write(ctx, w, i)(tx)
			})
		}},
		{"pipelined-first-write", func(ctx context.Context, w, i int) error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			var batch pgx.Batch
			batch.Queue("BEGIN")
			batch.Queue(raise, resource(w), i+1)
			batch.Queue(upd, i, w)
			if err := c.SendBatch(ctx, &batch).Close(); err != nil {
				c.Exec(ctx, "ROLLBACK")
				return err
			}
			_, err = c.Exec(ctx, "COMMIT")
			return err
		}},
	}
	variants = append(variants, struct {
		name string
		f    op
	}{"pipelined-store", func(ctx context.Context, w, i int) error {
		return sp.Fenced(ctx, fence.NewGrant(resource(w), fence.Token(i+1)), write(ctx, w, i))
	}}, struct {
		name string
		f    op
	}{"pipelined-unfenced", func(ctx context.Context, w, i int) error {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		var batch pgx.Batch
		batch.Queue("BEGIN")
		batch.Queue(upd, i, w)
		if err := c.SendBatch(ctx, &batch).Close(); err != nil {
			c.Exec(ctx, "ROLLBACK")
			return err
		}
		_, err = c.Exec(ctx, "COMMIT")
		return err
	}})
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) { benchpair.Compare(b, next, beginFunc, v.f) })
	}
}
