package lockclient_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The holder process: this test binary run again with helperEnv set. It takes
// one lock (or a set), prints "token N", and prints "lost ..." when the lock's Done closes.
const helperEnv = "LOCKCLIENT_TEST_HOLDER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHolder(spec))
	}
	os.Exit(m.Run())
}

func runHolder(spec string) int {
	eps, name, _ := strings.Cut(spec, " ")
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	c, err := lockclient.New(cli, lockclient.WithTTL(testTTL))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	// Bounded, so that a holder the test forgot cannot outlive it for long.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// "idle:NAME": the session idles first, and NAME is taken when an idle
	// renewal is nearly due (more than a busy interval after the last one).
	if n, ok := strings.CutPrefix(name, "idle:"); ok {
		name = n
		warm, err := c.Acquire(ctx, "warm-"+name)
		if err == nil {
			err = warm.Release(ctx)
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		time.Sleep(testTTL * 9 / 10)
	}
	// A comma-separated name is a set (AcquireSet).
	var l *lockclient.Lock
	if strings.Contains(name, ",") {
		l, err = c.AcquireSet(ctx, strings.Split(name, ","))
	} else {
		l, err = c.Acquire(ctx, name)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", l.Token())
	select {
	case <-l.Done():
		fmt.Println("lost", context.Cause(l.Context()), "checkgrant:", fence.CheckGrant(l))
	case <-ctx.Done():
	}
	return 0
}
