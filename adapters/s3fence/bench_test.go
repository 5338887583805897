package s3fence_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver/benchpair"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// BenchmarkPut compares a fenced Put (HEAD + conditional PUT) with a plain
// PutObject of the same 1 KiB body, 16 writers each on a key of its own, on
// loopback and through a proxy adding 0.25 ms each way (a 0.5 ms round trip). It
// reports both rates, their ratio (benchpair) and the requests per fenced Put.
func BenchmarkPut(b *testing.B) {
	const workers = 16
	for _, net := range []struct {
		name   string
		oneWay time.Duration
	}{{"loopback", 0}, {"rtt0.5ms", 250 * time.Microsecond}} {
		b.Run(net.name, func(b *testing.B) {
			client, bucket := gateway.Bucket(b)
			if net.oneWay > 0 {
				u, err := url.Parse(gateway.Endpoint)
				if err != nil {
					b.Fatal(err)
				}
				p, err := delayproxy.Start(u.Host, net.oneWay)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { p.Close() })
				client = s3.New(client.Options(), func(o *s3.Options) { o.BaseEndpoint = aws.String("http://" + p.Addr()) })
			}
			api := &counting{API: client}
			store, err := s3fence.New(api)
			if err != nil {
				b.Fatal(err)
			}
			body := bytes.Repeat([]byte("x"), 1024)
			input := func(prefix string, w int) *s3.PutObjectInput {
				return &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("%s/%d", prefix, w)), Body: bytes.NewReader(body)}
			}
			grants := make([]fence.Grant, workers)
			for w := range grants {
				grants[w] = fence.NewGrant(fmt.Sprint("writer-", w), 1)
			}
			plain := func(ctx context.Context, w, _ int) error {
				_, err := client.PutObject(ctx, input("plain", w))
				return err
			}
			var fencedOps atomic.Int64
			fenced := func(ctx context.Context, w, _ int) error {
				_, err := store.Put(ctx, grants[w], input("fenced", w))
				fencedOps.Add(1)
				return err
			}
			benchpair.Compare(b, make([]int, workers), plain, fenced)
			b.ReportMetric(float64(api.requests())/float64(fencedOps.Load()), "req/fenced_put")
		})
	}
}
