package quickstart_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/lockmetrics"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

// The README's migrations snippet: the library's tables through pgx's database/sql
// bridge.
func Example_migrations() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1/billing")
	if err != nil {
		log.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		log.Fatal(err)
	}
}

// The README's observability snippet.
func Example_observability() {
	var etcd *clientv3.Client // as in Example_pgx
	var pool *pgxpool.Pool
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	m, err := lockmetrics.New(prometheus.DefaultRegisterer)
	if err != nil {
		log.Fatal(err)
	}
	locks, err := lockclient.New(etcd, lockclient.WithObserver(m), lockclient.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	store, err := pgxfence.New(pool, pgxfence.WithObserver(m))
	if err != nil {
		log.Fatal(err)
	}
	_ = store
}

// The README's locktest snippet, run: a real etcd in the test process, and the whole
// quick start on SQLite against it.
func TestQuickstart_locktestAndSQLite(t *testing.T) {
	srv := locktest.Start(t)
	locks, err := lockclient.New(srv.Client(t), lockclient.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })

	ctx := t.Context()
	db, err := sqlite.Open(t.TempDir() + "/billing.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE invoices (account INTEGER PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}

	first, err := locks.Acquire(ctx, "account-42")
	if err != nil {
		t.Fatal(err)
	}
	stale := fence.NewGrant(first.Resource(), first.Token()) // kept by a holder that will freeze
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := locks.Acquire(ctx, "account-42")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { second.Release(context.Background()) })
	write := func(g fence.Grant, total int) error {
		return fence.Exec(ctx, store, g, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES (42, ?) ON CONFLICT (account) DO UPDATE SET total = excluded.total`, total)
			return err
		})
	}
	if err := write(second, 1250); err != nil {
		t.Fatalf("the holder's write: %v", err)
	}
	if err := write(stale, 999); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the stale holder's write = %v, want ErrStale", err)
	}
	var total int
	if err := db.QueryRowContext(ctx, `SELECT total FROM invoices WHERE account = 42`).Scan(&total); err != nil || total != 1250 {
		t.Fatalf("total = %d, %v; want the holder's 1250", total, err)
	}
}
