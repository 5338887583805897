package pgxfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
	"github.com/fencegate/fencegate/testserver/benchpair"
)

// BenchmarkNoLock compares, in one run against one server, the no-lock path with its
// unguarded baseline (benchpair.Compare: 20 alternating rounds, median ratio), 16 workers:
//
//   - decrement: Store.Decrement (UPDATE ... SET n = n - $1 WHERE id = $2 AND n >= $1
//     RETURNING n) vs the same UPDATE without the guard, each worker on its own row
//     and all on one hot row as in a flash sale; and, as "no-returning", vs the
//     unguarded UPDATE that does not read the new value back;
//   - once: Store.Once on a fresh key, whose fn inserts a charge, vs pgx.BeginFunc
//     inserting the same charge; and replay: Store.Once on a key already stored (fn
//     does not run) vs the same BeginFunc;
//   - control: the unguarded UPDATE against itself, the noise floor of the run.
func BenchmarkNoLock(b *testing.B) {
	const workers = 16
	pool := benchPool(b, workers)
	s := newStore(pool)
	mustExec(b, pool, "CREATE TABLE stock (id INT PRIMARY KEY, n BIGINT NOT NULL)")
	mustExec(b, pool, "INSERT INTO stock SELECT g, 1000000000000 FROM generate_series(0, $1) AS g", workers)
	mustExec(b, pool, "CREATE TABLE charges (w INT NOT NULL, i BIGINT NOT NULL, amount BIGINT NOT NULL, PRIMARY KEY (w, i))")
	next := make([]int, workers)

	own := func(w int) int { return w }
	hot := func(int) int { return workers } // the extra row no worker owns
	unguarded := func(row func(w int) int) op {
		return func(ctx context.Context, w, i int) error {
			var n int64
			return pool.QueryRow(ctx, "UPDATE stock SET n = n - $1 WHERE id = $2 RETURNING n", int64(1), row(w)).Scan(&n)
		}
	}
	noReturning := func(ctx context.Context, w, i int) error {
		_, err := pool.Exec(ctx, "UPDATE stock SET n = n - $1 WHERE id = $2", int64(1), w)
		return err
	}
	guarded := func(row func(w int) int) op {
		return func(ctx context.Context, w, i int) error {
			_, err := s.Decrement(ctx, nolock.Counter{Table: "stock", Key: []fence.Col{{Name: "id", Value: row(w)}}, Column: "n"}, 1)
			return err
		}
	}
	charge := func(ctx context.Context, tx pgx.Tx, w, i int) error {
		_, err := tx.Exec(ctx, "INSERT INTO charges (w, i, amount) VALUES ($1, $2, 5000)", w, i)
		return err
	}
	plainTx := func(ctx context.Context, w, i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return charge(ctx, tx, w, i) })
	}
	once := func(ctx context.Context, w, i int) error {
		_, err := s.Once(ctx, fmt.Sprintf("k-%d-%d", w, i), "amount=5000", func(tx pgx.Tx) ([]byte, error) {
			return []byte("receipt"), charge(ctx, tx, w, i)
		})
		return err
	}
	if _, err := s.Once(b.Context(), "stored", "amount=5000", func(pgx.Tx) ([]byte, error) { return []byte("receipt"), nil }); err != nil {
		b.Fatal(err)
	}
	replay := func(ctx context.Context, w, i int) error {
		r, err := s.Once(ctx, "stored", "amount=5000", func(pgx.Tx) ([]byte, error) { return nil, errors.New("replay ran fn") })
		if err == nil && !r.Replayed {
			err = errors.New("not a replay")
		}
		return err
	}

	b.Run("control", func(b *testing.B) { benchpair.Compare(b, next, unguarded(own), unguarded(own)) })
	b.Run("decrement/own-row", func(b *testing.B) { benchpair.Compare(b, next, unguarded(own), guarded(own)) })
	b.Run("decrement/hot-row", func(b *testing.B) { benchpair.Compare(b, next, unguarded(hot), guarded(hot)) })
	b.Run("decrement/no-returning", func(b *testing.B) { benchpair.Compare(b, next, noReturning, guarded(own)) })
	b.Run("once/fresh-key", func(b *testing.B) { benchpair.Compare(b, next, plainTx, once) })
	b.Run("once/replay", func(b *testing.B) { benchpair.Compare(b, next, plainTx, replay) })
}
