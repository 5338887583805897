// Package quickstart_test holds the README's quick-start snippets as Example
// functions, so the README's full snippets compile with the current API.
package quickstart_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/migrations"
)

// A billing job on one account with PostgreSQL: take the lock, write under its
// token, stop if a newer holder wrote.
func Example_pgx() {
	ctx := context.Background()
	etcd, err := clientv3.New(clientv3.Config{
		Endpoints: []string{"127.0.0.1:2379"},
		// etcd's client logs through its own zap logger: nil prints its JSON warnings
		// ("retrying of unary invoker failed") on stderr; give yours, or zap.NewNop().
		Logger: zap.NewNop(),
	})
	if err != nil {
		log.Fatal(err)
	}
	// lockclient logs through slog: grants, losses, and a wait on an unreachable etcd
	// ("etcd unreachable, waiting", every 5 s, naming the endpoints and the error).
	// One session lease, 10 s, renewed every 3 s.
	locks, err := lockclient.New(etcd, lockclient.WithLogger(slog.Default()))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1/billing")
	if err != nil {
		log.Fatal(err)
	}

	lock, err := locks.Acquire(ctx, "account-42") // waits while another server holds it
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	store, err := pgxfence.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	work := lock.Context() // ends when the lock does: every statement under the lock uses it
	err = fence.Exec(work, store, lock, func(tx pgx.Tx) error {
		_, err := tx.Exec(work, `UPDATE invoices SET total = $1 WHERE account = $2`, 1250, 42)
		return err
	})
	switch {
	case errors.Is(err, fence.ErrStale): // a newer holder wrote: stop, do not retry
	case errors.Is(err, fence.ErrLost): // our lease ran out before the write: stop
	case err != nil:
		log.Fatal(err)
	}
}

// The same job with database/sql (MySQL/MariaDB here; SQLite with sqlfence/sqlite's Open).
func Example_databaseSQL() {
	ctx := context.Background()
	var locks *lockclient.Client // as in Example_pgx
	db, err := mysql.Open("app:secret@tcp(127.0.0.1:3306)/billing")
	if err != nil {
		log.Fatal(err)
	}
	lock, err := locks.Acquire(ctx, "account-42", lockclient.WithManualRenewal(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	store, err := sqlfence.New(db, migrations.MySQL)
	if err != nil {
		log.Fatal(err)
	}
	err = fence.Exec(ctx, store, lock, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE invoices SET total = ? WHERE account = ?`, 1250, 42)
		return err
	})
	if errors.Is(err, fence.ErrStale) {
		return // a newer holder wrote
	}
}

// The classic one-statement form on a table with a fence_token column.
func Example_tokenColumn() {
	ctx := context.Background()
	var (
		store *pgxfence.Store  // from pgxfence.New(pool)
		lock  *lockclient.Lock // from Acquire
	)
	err := store.Update(ctx, lock,
		fence.Row{Table: "invoices", Key: []fence.Col{{Name: "account", Value: 42}}},
		fence.Col{Name: "total", Value: 1250}, fence.Col{Name: "status", Value: "sent"})
	var stale *fence.StaleError
	if errors.As(err, &stale) {
		log.Printf("refused: token %d, the row has seen %d", stale.Presented, stale.Seen)
	}
}
