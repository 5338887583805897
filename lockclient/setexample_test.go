package lockclient_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func ExampleClient_AcquireSet() {
	// A real etcd member in this process; a program dials its cluster instead.
	dir, err := os.MkdirTemp("", "lockclient-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := locktest.Run(dir)
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

	// Both accounts or neither; another worker may list them the other way round.
	ctx := context.Background()
	set, err := locks.AcquireSet(ctx, []string{"account-7", "account-42"})
	if err != nil {
		log.Fatal(err)
	}
	// fence.Exec(set.Context(), store, set, ...) raises the stored token of both.
	info, err := locks.Holder(ctx, "account-7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(set.Resources(), "one token:", info.Token == set.Token(), "held with", info.Set)
	if err := set.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: [account-42 account-7] one token: true held with [account-42 account-7]
}
