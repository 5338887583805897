package lockclient_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver/benchpair"
)

// BenchmarkPermit compares, in one run on one etcd member, a permit's
// AcquirePermit + Release (other) with a lock's Acquire + Release (the
// baseline), 16 workers each. own: every worker a semaphore of 1 permit of its
// own, so nothing contends (a permit's extra cost: the mark compare, the slots
// read). shared: all workers take permits of one semaphore of 16, so none
// waits but they race for the first free slot (a lost race costs an attempt).
// The machine is shared: only the ratio (other / baseline) means anything.
//
//	../shared/tools/quiet go test -run '^$' -bench Permit ./lockclient/
func BenchmarkPermit(b *testing.B) {
	srv := locktest.Start(b)
	const workers = 16
	for _, shared := range []bool{false, true} {
		b.Run(map[bool]string{false: "own", true: "shared"}[shared], func(b *testing.B) {
			c := newClient(b, srv.Client(b))
			lock := func(ctx context.Context, w, _ int) error {
				l, err := c.Acquire(ctx, fmt.Sprintf("lock-%v-%d", shared, w))
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
			permit := func(ctx context.Context, w, _ int) error {
				name, n := fmt.Sprintf("sem-own-%d", w), 1
				if shared {
					name, n = "sem-shared", workers
				}
				p, err := c.AcquirePermit(ctx, name, n)
				if err != nil {
					return err
				}
				return p.Release(ctx)
			}
			benchpair.Compare(b, make([]int, workers), lock, permit)
		})
	}
}
