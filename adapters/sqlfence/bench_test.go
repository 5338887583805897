package sqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
)

// benchParallelism * GOMAXPROCS workers, each on its own row and resource, so the
// MariaDB benchmarks measure statements and round trips rather than one hot row lock.
const benchParallelism = 32

// benchRows numbers the benchmark workers' rows across runs on one table.
var benchRows atomic.Int64

type benchOp func(ctx context.Context, id string, tok fence.Token) error

// pairBench runs the baseline and the fenced variant alternately in every worker, so
// both meet the same load, and reports each one's mean latency and their throughput
// ratio, fenced/base = baseline time / fenced time (1.0: fencing costs nothing).
func pairBench(b *testing.B, db *sql.DB, d migrations.Dialect, parallel bool, base, fenced benchOp) {
	par := 0
	if parallel {
		par = benchParallelism
	}
	pairBenchN(b, db, d, par, base, fenced)
}

// pairBenchN is pairBench with par * GOMAXPROCS workers (0: one, in b.Loop).
func pairBenchN(b *testing.B, db *sql.DB, d migrations.Dialect, par int, base, fenced benchOp) {
	b.Helper()
	var baseNs, fencedNs, ops, workers atomic.Int64
	run := func(next func() bool) {
		ctx := context.Background()
		workers.Add(1)
		id := fmt.Sprintf("w%d", benchRows.Add(1)) // a row and resource per worker, across runs
		if _, err := db.ExecContext(ctx, benchSQL(d, "INSERT INTO bench (id, val) VALUES (?, 0)"), id); err != nil {
			b.Error(err)
			return
		}
		var tok fence.Token
		var spent [2]time.Duration
		for next() {
			tok++
			for i := range 2 {
				which := (i + int(tok)) % 2 // alternate which variant goes first
				op := base
				if which == 1 {
					op = fenced
				}
				t0 := time.Now()
				if err := op(ctx, id, tok); err != nil {
					b.Error(err)
					return
				}
				spent[which] += time.Since(t0)
			}
		}
		baseNs.Add(int64(spent[0]))
		fencedNs.Add(int64(spent[1]))
		ops.Add(int64(tok))
	}
	b.ResetTimer()
	if par > 0 {
		b.SetParallelism(par)
		b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
	} else {
		run(b.Loop)
	}
	b.StopTimer()
	if n := ops.Load(); n > 0 && fencedNs.Load() > 0 {
		b.ReportMetric(float64(baseNs.Load())/float64(n)/1e3, "base-µs/op")
		b.ReportMetric(float64(fencedNs.Load())/float64(n)/1e3, "fenced-µs/op")
		b.ReportMetric(float64(baseNs.Load())/float64(fencedNs.Load()), "fenced/base")
	}
}

func benchDB(b *testing.B, open func(testing.TB) (*sql.DB, string)) *sql.DB {
	db, _ := open(b)
	db.SetMaxIdleConns(benchParallelism * 4) // database/sql keeps only 2 by default
	if _, err := db.ExecContext(b.Context(), "CREATE TABLE bench (id VARCHAR(20) PRIMARY KEY, "+
		"val BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)"); err != nil {
		b.Fatal(err)
	}
	return db
}

// benchSQL rewrites ? placeholders for PostgreSQL.
func benchSQL(d migrations.Dialect, q string) string {
	if d == migrations.Postgres {
		return dollars(q)
	}
	return q
}

const benchUpdate = "UPDATE bench SET val = ? WHERE id = ?"

func plainUpdate(db *sql.DB, d migrations.Dialect) benchOp {
	q := benchSQL(d, benchUpdate)
	return func(ctx context.Context, id string, tok fence.Token) error {
		_, err := db.ExecContext(ctx, q, int64(tok), id)
		return err
	}
}

func fencedUpdate(s *sqlfence.Store) benchOp {
	return func(ctx context.Context, id string, tok fence.Token) error {
		return s.Update(ctx, fence.NewGrant("bench-"+id, tok), fence.Row{Table: "bench", Key: []fence.Col{{Name: "id", Value: id}}},
			fence.Col{Name: "val", Value: int64(tok)})
	}
}

func unfencedTx(db *sql.DB, d migrations.Dialect) benchOp {
	q := benchSQL(d, benchUpdate)
	return func(ctx context.Context, id string, tok fence.Token) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, q, int64(tok), id); err != nil {
			return err
		}
		return tx.Commit()
	}
}

func fencedTx(s *sqlfence.Store) benchOp {
	q := benchSQL(s.Dialect(), benchUpdate)
	return func(ctx context.Context, id string, tok fence.Token) error {
		return fence.Exec(ctx, s, fence.NewGrant("bench-"+id, tok), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, q, int64(tok), id)
			return err
		})
	}
}

// BenchmarkMariaDB_Update: the token-column Update (one statement) against the
// plain UPDATE of the same row; target fenced/base >= 0.95.
func BenchmarkMariaDB_Update(b *testing.B) {
	db := benchDB(b, mysqlDB)
	pairBench(b, db, migrations.MySQL, true, plainUpdate(db, migrations.MySQL), fencedUpdate(newStore(db, migrations.MySQL)))
}

// BenchmarkMariaDB_UpdateSameGrant is BenchmarkMariaDB_Update where each worker holds
// one grant for all its writes (a holder writing many rows under one token): the fence
// row is locked but not rewritten.
func BenchmarkMariaDB_UpdateSameGrant(b *testing.B) {
	db := benchDB(b, mysqlDB)
	fenced := fencedUpdate(newStore(db, migrations.MySQL))
	pairBench(b, db, migrations.MySQL, true, plainUpdate(db, migrations.MySQL), func(ctx context.Context, id string, _ fence.Token) error {
		return fenced(ctx, id, 1)
	})
}

// BenchmarkMariaDB_Exec: fence.Exec with one UPDATE against BEGIN, the same UPDATE,
// COMMIT. The fence row raise is one more round trip in the transaction.
func BenchmarkMariaDB_Exec(b *testing.B) {
	db := benchDB(b, mysqlDB)
	pairBench(b, db, migrations.MySQL, true, unfencedTx(db, migrations.MySQL), fencedTx(newStore(db, migrations.MySQL)))
}

// BenchmarkSQLite_Update and BenchmarkSQLite_Exec: the same pairs on the embedded
// database, one writer (SQLite has one write lock per file).
func BenchmarkSQLite_Update(b *testing.B) {
	db := benchDB(b, sqliteDB)
	pairBench(b, db, migrations.SQLite, false, plainUpdate(db, migrations.SQLite), fencedUpdate(newStore(db, migrations.SQLite)))
}

func BenchmarkSQLite_Exec(b *testing.B) {
	db := benchDB(b, sqliteDB)
	pairBench(b, db, migrations.SQLite, false, unfencedTx(db, migrations.SQLite), fencedTx(newStore(db, migrations.SQLite)))
}

// BenchmarkPostgres_Update and BenchmarkPostgres_Exec: the same pairs on PostgreSQL
// through database/sql (pgx's stdlib driver); pgxfence has the pgx-native numbers.
func BenchmarkPostgres_Update(b *testing.B) {
	db := benchDB(b, postgresDB)
	pairBench(b, db, migrations.Postgres, true, plainUpdate(db, migrations.Postgres), fencedUpdate(newStore(db, migrations.Postgres)))
}

func BenchmarkPostgres_Exec(b *testing.B) {
	db := benchDB(b, postgresDB)
	pairBench(b, db, migrations.Postgres, true, unfencedTx(db, migrations.Postgres), fencedTx(newStore(db, migrations.Postgres)))
}
