package fencemark_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/migrations"
)

// An operator cuts off every holder of account-42 granted so far, at once.
func ExampleRaise() {
	dir, err := os.MkdirTemp("", "fencemark-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := locktest.Run(dir) // a real etcd member; a program dials its cluster
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locks, err := lockclient.New(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		log.Fatal(err)
	}

	stuck, err := locks.Acquire(ctx, "account-42") // a holder that stopped responding
	if err != nil {
		log.Fatal(err)
	}
	next, err := locks.NextToken(ctx)
	if err != nil {
		log.Fatal(err)
	}
	before, after, err := fencemark.Raise(ctx, db, migrations.SQLite, "account-42", next)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("mark before:", before, "after == next:", after == next, "holder refused:", stuck.Token() < after)
	// Output: mark before: 0 after == next: true holder refused: true
}
