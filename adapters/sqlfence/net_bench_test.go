package sqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/migrations"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// BenchmarkMariaDB_Net is BenchmarkMariaDB_Update's and _Exec's pairs, and Update
// against the least statement that writes both rows (update-vs-tworows), on loopback and
// through testserver/delayproxy at 250 µs each way (a 0.5 ms round trip), at 1, 16 and
// 64 workers.
func BenchmarkMariaDB_Net(b *testing.B) {
	var dsn string
	direct := benchDB(b, func(tb testing.TB) (*sql.DB, string) {
		db, d := mysqlDB(tb)
		dsn = d
		return db, d
	})
	for _, oneWay := range []time.Duration{0, 250 * time.Microsecond} {
		db := direct
		if oneWay > 0 {
			db = proxiedMySQL(b, dsn, oneWay)
		}
		s := newStore(db, migrations.MySQL)
		for _, workers := range []int{1, 16, 64} {
			par := max(1, workers/runtime.GOMAXPROCS(0))
			if workers == 1 {
				par = 0 // one worker in b.Loop: round trips, not the server's CPU, decide
			}
			rtt := fmt.Sprintf("rtt=%v", 2*oneWay)
			b.Run(fmt.Sprintf("%s/update/workers=%d", rtt, workers), func(b *testing.B) {
				pairBenchN(b, db, migrations.MySQL, par, plainUpdate(db, migrations.MySQL), fencedUpdate(s))
			})
			b.Run(fmt.Sprintf("%s/update-vs-tworows/workers=%d", rtt, workers), func(b *testing.B) {
				pairBenchN(b, db, migrations.MySQL, par, twoRowsMySQL(db), fencedUpdate(s))
			})
			b.Run(fmt.Sprintf("%s/tx/workers=%d", rtt, workers), func(b *testing.B) {
				pairBenchN(b, db, migrations.MySQL, par, unfencedTx(db, migrations.MySQL), fencedTx(s))
			})
		}
	}
}

// twoRowsMySQL writes the resource's mark and the row in one multi-table UPDATE,
// checking nothing: Update's second baseline, the least statement that writes both.
func twoRowsMySQL(db *sql.DB) benchOp {
	const q = "UPDATE fence_tokens AS ft JOIN bench AS t ON t.id = ? SET ft.token = ?, t.val = ? WHERE ft.resource = ?"
	return func(ctx context.Context, id string, tok fence.Token) error {
		_, err := db.ExecContext(ctx, q, id, int64(tok), int64(tok), "bench-"+id)
		return err
	}
}

// proxiedMySQL opens a second pool on the benchmark's MariaDB database through a
// delaying proxy.
func proxiedMySQL(b *testing.B, dsn string, oneWay time.Duration) *sql.DB {
	b.Helper()
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	p, err := delayproxy.Start(cfg.Addr, oneWay)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	cfg.Addr = p.Addr()
	db, err := mysql.Open(cfg.FormatDSN())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(benchParallelism * 4)
	return db
}
