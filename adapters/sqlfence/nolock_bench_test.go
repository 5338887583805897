package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/nolock"
	"github.com/fencegate/fencegate/testserver/benchpair"
)

// BenchmarkNoLock compares, in one run per database, the no-lock path with its
// unguarded baseline (benchpair.Compare), 16 workers on MariaDB and PostgreSQL (database/sql),
// 1 on SQLite (one writer per file):
//
//   - decrement: Store.Decrement vs the same UPDATE without the guard (AND n >= ?),
//     reading the new value back the same way (MariaDB: LAST_INSERT_ID(n - ?); the
//     others: RETURNING), each worker on its own row and all on one hot row; own-row
//     is the text query a user would write by hand;
//   - decrement/prepared-baseline: the same unguarded statement as a *sql.Stmt
//     prepared once, vs Store.Decrement, each worker on its own row. On SQLite and
//     MariaDB Decrement prepares its take too, so the pair is on one footing; on
//     PostgreSQL pgx prepares both by text anyway;
//   - decrement/tx-select (MariaDB): the alternative to LAST_INSERT_ID, a transaction
//     with the guarded UPDATE and a SELECT of the new value, against Store.Decrement;
//   - once: Store.Once on a fresh key, whose fn inserts a charge, vs a transaction
//     inserting the same charge; replay: Store.Once on a stored key vs the same;
//   - control: the unguarded decrement against itself, the noise floor.
func BenchmarkNoLock(b *testing.B) {
	for _, be := range backends {
		workers := 16
		if be.d == migrations.SQLite {
			workers = 1
		}
		b.Run(be.name, func(b *testing.B) { benchNoLock(b, be, workers) })
	}
}

func benchNoLock(b *testing.B, be backend, workers int) {
	db, _ := be.open(b)
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	d := be.d
	s := newStore(db, d)
	mustExec(b, db, "CREATE TABLE stock (id INT PRIMARY KEY, n BIGINT NOT NULL)")
	for w := range workers + 1 {
		nlExec(b, db, d, "INSERT INTO stock (id, n) VALUES (?, 1000000000000)", w)
	}
	mustExec(b, db, "CREATE TABLE charges (w INT NOT NULL, i BIGINT NOT NULL, amount BIGINT NOT NULL, PRIMARY KEY (w, i))")
	next := make([]int, workers)

	own := func(w int) int { return w }
	hot := func(int) int { return workers } // the extra row no worker owns
	unguardedSQL := ph(d, "UPDATE stock SET n = n - ? WHERE id = ? RETURNING n")
	if d == migrations.MySQL {
		unguardedSQL = "UPDATE stock SET n = LAST_INSERT_ID(n - ?) WHERE id = ?"
	}
	unguarded := func(row func(int) int) benchpair.Op {
		if d == migrations.MySQL {
			return func(ctx context.Context, w, i int) error {
				res, err := db.ExecContext(ctx, unguardedSQL, int64(1), row(w))
				if err == nil {
					_, err = res.LastInsertId()
				}
				return err
			}
		}
		return func(ctx context.Context, w, i int) error {
			var n int64
			return db.QueryRowContext(ctx, unguardedSQL, int64(1), row(w)).Scan(&n)
		}
	}
	prepared, err := db.PrepareContext(b.Context(), unguardedSQL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { prepared.Close() })
	unguardedPrepared := func(ctx context.Context, w, i int) error {
		if d == migrations.MySQL {
			res, err := prepared.ExecContext(ctx, int64(1), own(w))
			if err == nil {
				_, err = res.LastInsertId()
			}
			return err
		}
		var n int64
		return prepared.QueryRowContext(ctx, int64(1), own(w)).Scan(&n)
	}
	guarded := func(row func(int) int) benchpair.Op {
		return func(ctx context.Context, w, i int) error {
			_, err := s.Decrement(ctx, nolock.Counter{Table: "stock", Key: []fence.Col{{Name: "id", Value: row(w)}}, Column: "n"}, 1)
			return err
		}
	}
	txSelect := func(ctx context.Context, w, i int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, "UPDATE stock SET n = n - ? WHERE id = ? AND n >= ?", int64(1), w, int64(1))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("tx-select took nothing: %v", err)
		}
		var n int64
		if err := tx.QueryRowContext(ctx, "SELECT n FROM stock WHERE id = ?", w).Scan(&n); err != nil {
			return err
		}
		return tx.Commit()
	}
	chargeSQL := ph(d, "INSERT INTO charges (w, i, amount) VALUES (?, ?, 5000)")
	plainTx := func(ctx context.Context, w, i int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, chargeSQL, w, i); err != nil {
			return err
		}
		return tx.Commit()
	}
	once := func(ctx context.Context, w, i int) error {
		_, err := s.Once(ctx, fmt.Sprintf("k-%d-%d", w, i), "amount=5000", func(tx *sql.Tx) ([]byte, error) {
			_, err := tx.ExecContext(ctx, chargeSQL, w, i)
			return []byte("receipt"), err
		})
		return err
	}
	if _, err := s.Once(b.Context(), "stored", "amount=5000", func(*sql.Tx) ([]byte, error) { return []byte("receipt"), nil }); err != nil {
		b.Fatal(err)
	}
	replay := func(ctx context.Context, w, i int) error {
		r, err := s.Once(ctx, "stored", "amount=5000", func(*sql.Tx) ([]byte, error) { return nil, errors.New("replay ran fn") })
		if err == nil && !r.Replayed {
			err = errors.New("not a replay")
		}
		return err
	}

	b.Run("control", func(b *testing.B) { benchpair.Compare(b, next, unguarded(own), unguarded(own)) })
	b.Run("decrement/own-row", func(b *testing.B) { benchpair.Compare(b, next, unguarded(own), guarded(own)) })
	b.Run("decrement/prepared-baseline", func(b *testing.B) { benchpair.Compare(b, next, unguardedPrepared, guarded(own)) })
	if workers > 1 {
		b.Run("decrement/hot-row", func(b *testing.B) { benchpair.Compare(b, next, unguarded(hot), guarded(hot)) })
	}
	if d == migrations.MySQL {
		b.Run("decrement/tx-select", func(b *testing.B) { benchpair.Compare(b, next, guarded(own), txSelect) })
	}
	b.Run("once/fresh-key", func(b *testing.B) { benchpair.Compare(b, next, plainTx, once) })
	b.Run("once/replay", func(b *testing.B) { benchpair.Compare(b, next, plainTx, replay) })
}
