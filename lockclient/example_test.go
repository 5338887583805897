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

func ExampleClient_Acquire() {
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
	locks, err := lockclient.New(cli, lockclient.WithIdentity("billing-worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	// Acquire waits for the holder, and for etcd while it cannot be reached, as
	// long as its ctx lets it: ctx is its only bound, so give it one.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := locks.Acquire(ctx, "account-42")
	if err != nil {
		log.Fatal(err)
	}
	// Protected work runs under lock.Context() and presents the lock with every
	// write (fence.Exec(ctx, store, lock, ...)), so a stale holder is refused.
	info, err := locks.Holder(ctx, "account-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.ClientID, "holds", lock.Resource(), "with its token:", info.Token == lock.Token())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: billing-worker-1 holds account-42 with its token: true
}
