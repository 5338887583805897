package lockclient_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver/benchpair"
)

// BenchmarkAcquireSet compares, in one run on one etcd member, an
// uncontended AcquireSet + Release of n names (other) with the baseline: the same
// n names taken one Acquire after another and released one by one (n = 1: one
// Acquire + Release). Each worker uses names of its own, so nothing waits. The
// ratio is other's rate / the baseline's; the machine is shared, so only the ratio
// means anything.
//
//	go test -run '^$' -bench BenchmarkAcquireSet -benchtime 20x ./lockclient/
func BenchmarkAcquireSet(b *testing.B) {
	srv := locktest.Start(b)
	const workers = 16
	for _, n := range []int{1, 2, 8, 32} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			c := newClient(b, srv.Client(b))
			names := func(kind string, w, i int) []string {
				ns := make([]string, n)
				for k := range ns {
					ns[k] = fmt.Sprintf("%s-%d-%d-%d", kind, w, i, k)
				}
				return ns
			}
			singles := func(ctx context.Context, w, i int) error {
				var held []*lockclient.Lock
				for _, name := range names("one", w, i) {
					l, err := c.Acquire(ctx, name)
					if err != nil {
						return err
					}
					held = append(held, l)
				}
				for _, l := range held {
					if err := l.Release(ctx); err != nil {
						return err
					}
				}
				return nil
			}
			set := func(ctx context.Context, w, i int) error {
				s, err := c.AcquireSet(ctx, names("set", w, i))
				if err != nil {
					return err
				}
				return s.Release(ctx)
			}
			benchpair.Compare(b, make([]int, workers), singles, set)
		})
	}
}
