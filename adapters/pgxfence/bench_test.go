package pgxfence_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

// op is one write by worker w (its own row and resource), the i-th of that worker.
type op func(ctx context.Context, w, i int) error

// BenchmarkFenced compares, in one run against one server, each fenced write with its
// unfenced baseline at 16 and 64 concurrent workers:
//
//   - update: Store.Update (one conditional UPDATE) vs a plain UPDATE of the same row;
//   - tx: fence.Exec with one UPDATE vs pgx.BeginFunc with the same UPDATE.
//
// Each worker writes its own row for its own resource (a lock serialises the writers
// of one resource anyway). The variants alternate in rounds (ABBA) so drift on the
// shared machine falls on both; b.N is the number of writes per variant per round.
// Reported: base_ops/s, fenced_ops/s and ratio = fenced / base (the targets: >= 0.95
// for update, >= 1.0 for tx).
func BenchmarkFenced(b *testing.B) {
	for _, workers := range []int{16, 64} {
		pool := benchPool(b, workers)
		s := pgxfence.New(pool)
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
		b.Run(fmt.Sprintf("update/workers=%d", workers), func(b *testing.B) {
			comparePair(b, next, plainUpdate, fencedUpdate)
		})
		b.Run(fmt.Sprintf("tx/workers=%d", workers), func(b *testing.B) {
			comparePair(b, next, beginFunc, fencedExec)
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

// comparePair runs base and fenced alternately and reports both rates and their ratio.
func comparePair(b *testing.B, next []int, base, fenced op) {
	ctx := context.Background()
	workers := len(next)
	run := func(f op, n int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			share := n / workers
			if w < n%workers {
				share++
			}
			wg.Go(func() {
				for range share {
					next[w]++
					if err := f(ctx, w, next[w]); err != nil {
						b.Errorf("worker %d: %v", w, err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	run(base, 4*workers) // warm the pool and the statement caches of both
	run(fenced, 4*workers)
	b.ResetTimer()
	var baseDur, fencedDur time.Duration
	for round := range 4 {
		if round%3 == 0 { // A B B A
			baseDur += run(base, b.N)
			fencedDur += run(fenced, b.N)
		} else {
			fencedDur += run(fenced, b.N)
			baseDur += run(base, b.N)
		}
	}
	b.StopTimer()
	baseRate := float64(4*b.N) / baseDur.Seconds()
	fencedRate := float64(4*b.N) / fencedDur.Seconds()
	b.ReportMetric(baseRate, "base_ops/s")
	b.ReportMetric(fencedRate, "fenced_ops/s")
	b.ReportMetric(fencedRate/baseRate, "ratio")
}
