package lockmetrics_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/lockmetrics"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// One Metrics for a lock client (and any adapters' stores), registered with a
// registry that a promhttp handler serves.
func Example() {
	dir, _ := os.MkdirTemp("", "lockmetrics-example-")
	defer os.RemoveAll(dir)
	etcd, err := locktest.Run(dir) // a real etcd in-process; production uses a cluster
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics, err := lockmetrics.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	locks, err := lockclient.New(cli, lockclient.WithObserver(metrics))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	ctx := context.Background()
	lock, err := locks.Acquire(ctx, "account-42")
	if err != nil {
		log.Fatal(err)
	}
	held := func() float64 { // what a scrape of fencegate_locks_held shows
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "fencegate_locks_held" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	fmt.Println("held while working:", held())
	lock.Release(ctx)
	fmt.Println("held after release:", held())
	n, _ := testutil.GatherAndCount(reg, "fencegate_lock_acquisitions_total")
	fmt.Println("acquisition results exported:", n)
	// Output:
	// held while working: 1
	// held after release: 0
	// acquisition results exported: 3
}
