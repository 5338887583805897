package s3fence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// A report written under a lock: a holder that lost its lock is refused before any
// request (fence.ErrLost), and one whose successor already wrote is refused by the
// store (fence.ErrStale).
func ExampleStore_Put() {
	var (
		ctx    context.Context
		client *s3.Client         // your S3 client
		locks  *lockclient.Client // your lock client
		report []byte
	)
	store, err := s3fence.New(client)
	if err != nil {
		panic(err)
	}
	lock, err := locks.Acquire(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	defer lock.Release(ctx)
	_, err = store.Put(ctx, lock, &s3.PutObjectInput{
		Bucket: aws.String("reports"),
		Key:    aws.String("2026-12-01.csv"),
		Body:   bytes.NewReader(report),
	})
	switch {
	case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrLost):
		fmt.Println("another holder owns the report now; stop")
	case err != nil:
		panic(err)
	}
}

// Several objects: data under keys of their own, then the manifest naming them,
// last. A stale holder's parts are never named, since its manifest is refused.
func ExampleStore_Put_manifest() {
	var (
		ctx   context.Context
		store *s3fence.Store
		lock  *lockclient.Lock
		parts [][]byte
	)
	var keys []string
	for i, part := range parts {
		key := fmt.Sprintf("snapshots/%d/part-%d", lock.Token(), i)
		if _, err := store.Put(ctx, lock, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String(key), Body: bytes.NewReader(part)}); err != nil {
			panic(err)
		}
		keys = append(keys, key)
	}
	manifest, _ := json.Marshal(keys)
	if _, err := store.Put(ctx, lock, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("snapshots/manifest.json"), Body: bytes.NewReader(manifest)}); err != nil {
		panic(err) // fence.ErrStale: a newer snapshot is the current one
	}
}

// Read-modify-write under a lock: Get returns the version, PutIfMatch writes over
// exactly that version in one request.
func ExampleStore_PutIfMatch() {
	var (
		ctx   context.Context
		store *s3fence.Store
		lock  *lockclient.Lock
	)
	in := &s3.GetObjectInput{Bucket: aws.String("state"), Key: aws.String("counter")}
	obj, err := store.Get(ctx, lock, in)
	if err != nil {
		panic(err)
	}
	b, err := io.ReadAll(obj.Body)
	obj.Body.Close()
	if err != nil {
		panic(err)
	}
	next := append(b, '+')
	_, err = store.PutIfMatch(ctx, lock, &s3.PutObjectInput{Bucket: in.Bucket, Key: in.Key, Body: bytes.NewReader(next)}, obj.Version)
	if errors.Is(err, s3fence.ErrChanged) {
		fmt.Println("changed since read: read again")
	}
}
