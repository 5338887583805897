package redisfence_test

import (
	"context"
	"errors"
	"log"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// A report cached in Redis under a lock: a holder whose successor already wrote
// is refused by Redis (fence.ErrStale), one that knows its lock is lost before
// any I/O (fence.ErrLost).
func ExampleStore_Set() {
	var (
		ctx    context.Context
		rdb    *redis.Client      // or a *redis.ClusterClient
		locks  *lockclient.Client // your lock client
		report []byte
	)
	store, err := redisfence.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	lock, err := locks.Acquire(ctx, "report-42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	// The key carries the resource as hash tag: on a Cluster it shares the mark's slot.
	err = store.Set(ctx, lock, "{report-42}:csv", report, 24*time.Hour)
	switch {
	case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrLost):
		log.Printf("not the holder any more: %v", err) // stop; do not retry
	case errors.Is(err, fence.ErrCommitUnknown):
		log.Printf("may or may not have landed: %v", err) // read it back to know
	case err != nil:
		log.Fatal(err)
	}
}

// A fenced transaction: the commands queued on tx run after the check, atomically,
// in one round trip.
func ExampleStore_Fenced() {
	var (
		ctx   context.Context
		store *redisfence.Store
		lock  *lockclient.Lock
	)
	var runs *redis.IntCmd
	err := fence.Exec(ctx, store, lock, func(tx redis.Pipeliner) error {
		tx.Set(ctx, "{job-7}:progress", 100, 0)
		runs = tx.HIncrBy(ctx, "{job-7}:stats", "runs", 1)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("run %d done", runs.Val())
}

// A read-modify-write: read the value with the stored token, compute, write back
// with the same grant. The write-back is refused if a newer holder wrote since.
func ExampleStore_Get() {
	var (
		ctx   context.Context
		store *redisfence.Store
		lock  *lockclient.Lock
	)
	v, err := store.Get(ctx, lock, "{quota-9}:left")
	if err != nil {
		log.Fatal(err) // fence.ErrNotFound for a missing key, *fence.StaleError if a newer holder wrote
	}
	left, _ := strconv.Atoi(v.Val)
	if err := store.Set(ctx, lock, "{quota-9}:left", left-1, 0); err != nil {
		log.Fatal(err)
	}
}
