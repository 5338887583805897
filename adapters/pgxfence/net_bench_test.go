package pgxfence_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver/benchpair"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// BenchmarkFencedNet is BenchmarkFenced's update and tx pairs, and Update against
// the least statement that writes both rows (update-vs-tworows), on loopback and through
// testserver/delayproxy at 250 µs each way (a 0.5 ms round trip, where round trips, not
// the server's CPU, decide), at 16 and 64 workers.
func BenchmarkFencedNet(b *testing.B) {
	for _, oneWay := range []time.Duration{0, 250 * time.Microsecond} {
		for _, workers := range []int{16, 64} {
			pool := benchPool(b, workers)
			if oneWay > 0 {
				pool = proxiedPool(b, pool, workers, oneWay)
			}
			s := newStore(pool)
			res := resources(workers)
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
			// twoRows is the least statement that writes both the row and the
			// resource's mark, with no check at all: the floor under any fenced Update.
			twoRows := func(ctx context.Context, w, i int) error {
				_, err := pool.Exec(ctx, twoRowSQL, i+1, res[w], i, w)
				return err
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
			rtt := fmt.Sprintf("rtt=%v", 2*oneWay)
			b.Run(fmt.Sprintf("%s/update/workers=%d", rtt, workers), func(b *testing.B) {
				benchpair.Compare(b, next, plainUpdate, fencedUpdate)
			})
			b.Run(fmt.Sprintf("%s/update-vs-tworows/workers=%d", rtt, workers), func(b *testing.B) {
				benchpair.Compare(b, next, twoRows, fencedUpdate)
			})
			b.Run(fmt.Sprintf("%s/tx/workers=%d", rtt, workers), func(b *testing.B) {
				benchpair.Compare(b, next, beginFunc, fencedExec)
			})
		}
	}
}

// twoRowSQL writes the resource's mark and the row in one statement, checking
// nothing: Update's second baseline.
const twoRowSQL = "WITH r AS (UPDATE fence_tokens SET token = $1 WHERE resource = $2 RETURNING 1) " +
	"UPDATE bench SET val = $3 WHERE id = $4 AND EXISTS (SELECT 1 FROM r)"

// proxiedPool returns a pool like pool whose connections go through a delaying proxy.
func proxiedPool(b *testing.B, pool *pgxpool.Pool, workers int, oneWay time.Duration) *pgxpool.Pool {
	b.Helper()
	cfg := pool.Config()
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	p, err := delayproxy.Start(target, oneWay)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(p.Port())
	cfg.MaxConns, cfg.MinConns = int32(workers), int32(workers)
	proxied, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(proxied.Close)
	return proxied
}
