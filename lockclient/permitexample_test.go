package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func ExampleClient_AcquirePermit() {
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
	locks, err := lockclient.New(cli, lockclient.WithIdentity("exporter"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	// At most 2 exports at once: each permit is a slot with its own token.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := locks.AcquirePermit(ctx, "exports", 2)
	if err != nil {
		log.Fatal(err)
	}
	b, err := locks.AcquirePermit(ctx, "exports", 2)
	if err != nil {
		log.Fatal(err)
	}
	// fence.Exec(a.Context(), store, a, ...) fences the writes of slot a.Resource().
	_, err = locks.TryAcquirePermit(ctx, "exports", 2)
	fmt.Println(a.Resource(), b.Resource(), "third:", errors.Is(err, lockclient.ErrHeld))
	holders, err := locks.List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range holders {
		if h.Semaphore == "exports" {
			fmt.Println(h.Name, h.ClientID, h.Token == a.Token() || h.Token == b.Token())
		}
	}
	for _, p := range []*lockclient.Lock{a, b} {
		if err := p.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// exports/0000 exports/0001 third: true
	// exports/0000 exporter true
	// exports/0001 exporter true
}
