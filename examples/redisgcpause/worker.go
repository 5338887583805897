package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// worker takes the lock (waiting for it), prepares its report, says ready and
// writes when told to. Its session lease is cfg.lease: frozen, it loses the lock
// once that runs out. Errors are reported on out as "error ..." lines too.
func worker(ctx context.Context, cfg config, in io.Reader, out io.Writer) (err error) {
	defer func() {
		if err != nil {
			fmt.Fprintf(out, "error %v\n", err)
		}
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.etcd, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	locks, err := lockclient.New(cli, lockclient.WithTTL(cfg.lease))
	if err != nil {
		return err
	}
	defer locks.Close()
	lock, err := locks.Acquire(ctx, cfg.resource)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redis})
	defer rdb.Close()
	store, err := redisfence.New(rdb)
	if err != nil {
		return err
	}
	key := "{" + cfg.resource + "}:report"
	report := fmt.Sprintf("report by worker %s, token %d", cfg.name, lock.Token())
	fmt.Fprintf(out, "token %d\nready\n", lock.Token())
	lines := bufio.NewScanner(in)
	if !lines.Scan() || lines.Text() != "write" {
		return errors.New("no write command")
	}
	if cfg.noFence {
		err = rdb.Set(ctx, key, report, 0).Err()
	} else {
		// The bare token, not the lock: a holder that has not noticed its loss (the
		// lock itself would be refused before any I/O, fence.ErrLost, once its
		// client noticed).
		err = store.Set(ctx, fence.NewGrant(lock.Resource(), lock.Token()), key, report, 0)
	}
	var se *fence.StaleError
	switch {
	case err == nil:
		fmt.Fprintln(out, "result accepted")
	case errors.As(err, &se):
		fmt.Fprintf(out, "result refused: %v\n", err)
	default:
		return err
	}
	return nil
}
