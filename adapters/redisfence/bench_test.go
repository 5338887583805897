package redisfence_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/testserver/benchpair"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

const benchWorkers = 16

var nets = []struct {
	name   string
	oneWay time.Duration
}{{"loopback", 0}, {"rtt0.5ms", 250 * time.Microsecond}}

// benchClient returns a client of the package's node, through a proxy adding
// oneWay each way when it is > 0, and the count of commands it sends.
func benchClient(b *testing.B, oneWay time.Duration) (*redis.Client, *counter) {
	b.Helper()
	opts := node.Options(b)
	if oneWay > 0 {
		p, err := delayproxy.Start(opts.Addr, oneWay)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		opts.Addr = p.Addr()
	}
	opts.PoolSize = benchWorkers
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { rdb.Close() })
	c := &counter{}
	rdb.AddHook(c)
	return rdb, c
}

// BenchmarkSet compares a fenced Set (one EVALSHA: check, SET, raise) with a plain
// SET of the same 100-byte value, 16 writers each on a resource and key of its
// own, on loopback and through a proxy adding 0.25 ms each way. It reports both
// rates and their ratio (benchpair), the commands sent per fenced Set, and the
// server's own time per call of each (INFO commandstats), which is what decides
// on loopback.
func BenchmarkSet(b *testing.B) {
	for _, net := range nets {
		b.Run(net.name, func(b *testing.B) {
			rdb, sent := benchClient(b, net.oneWay)
			store, err := redisfence.New(rdb)
			if err != nil {
				b.Fatal(err)
			}
			value := strings.Repeat("x", 100)
			grants, keys := benchGrants(b.Name())
			var plainOps, fencedOps atomic.Int64
			plain := func(ctx context.Context, w, _ int) error {
				plainOps.Add(1)
				return rdb.Set(ctx, keys[w]+":plain", value, 0).Err()
			}
			fenced := func(ctx context.Context, w, _ int) error {
				fencedOps.Add(1)
				return store.Set(ctx, grants[w], keys[w], value, 0)
			}
			stats := serverTime(b, rdb)
			before := sent.n.Load()
			benchpair.Compare(b, make([]int, benchWorkers), plain, fenced)
			s := stats()
			b.ReportMetric(float64(sent.n.Load()-before-plainOps.Load())/float64(fencedOps.Load()), "cmds/fenced_set")
			// The script's SET is counted under set too, at about a plain SET's time.
			b.ReportMetric(s["set"].usecPerCall, "server_µs/set")
			b.ReportMetric(s["evalsha"].usecPerCall, "server_µs/fenced_set")
		})
	}
}

// BenchmarkFenced compares a fenced transaction of two commands (SET and HINCRBY
// on the resource's keys, one EVALSHA) with a plain MULTI/EXEC of the same two
// (TxPipelined: one round trip), 16 writers each on a resource of its own, loopback
// and 0.5 ms round trip.
func BenchmarkFenced(b *testing.B) {
	for _, net := range nets {
		b.Run(net.name, func(b *testing.B) {
			rdb, sent := benchClient(b, net.oneWay)
			store, err := redisfence.New(rdb)
			if err != nil {
				b.Fatal(err)
			}
			value := strings.Repeat("x", 100)
			grants, keys := benchGrants(b.Name())
			plain := func(ctx context.Context, w, _ int) error {
				_, err := rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
					tx.Set(ctx, keys[w]+":plain", value, 0)
					tx.HIncrBy(ctx, keys[w]+":plain-stats", "runs", 1)
					return nil
				})
				return err
			}
			fenced := func(ctx context.Context, w, _ int) error {
				return fence.Exec(ctx, store, grants[w], func(tx redis.Pipeliner) error {
					tx.Set(ctx, keys[w], value, 0)
					tx.HIncrBy(ctx, keys[w]+"-stats", "runs", 1)
					return nil
				})
			}
			var plainOps, fencedOps atomic.Int64
			plainOnce := plain
			plain = func(ctx context.Context, w, i int) error { plainOps.Add(1); return plainOnce(ctx, w, i) }
			fencedOnce := fenced
			fenced = func(ctx context.Context, w, i int) error { fencedOps.Add(1); return fencedOnce(ctx, w, i) }
			stats := serverTime(b, rdb)
			before := sent.n.Load()
			benchpair.Compare(b, make([]int, benchWorkers), plain, fenced)
			s := stats()
			// A plain transaction is MULTI, two commands, EXEC; a fenced one, one EVALSHA.
			b.ReportMetric(float64(sent.n.Load()-before-4*plainOps.Load())/float64(fencedOps.Load()), "cmds/fenced_tx")
			b.ReportMetric(s["exec"].usecPerCall+s["multi"].usecPerCall, "server_µs/multi+exec")
			b.ReportMetric(s["evalsha"].usecPerCall, "server_µs/fenced_tx")
		})
	}
}

func benchGrants(name string) ([]fence.Grant, []string) {
	grants := make([]fence.Grant, benchWorkers)
	keys := make([]string, benchWorkers)
	for w := range grants {
		res := fmt.Sprintf("%s-%d", name, w)
		grants[w] = fence.NewGrant(res, 1)
		keys[w] = "{" + res + "}:v"
	}
	return grants, keys
}

type cmdStat struct {
	calls       int64
	usecPerCall float64
}

var cmdstatRE = regexp.MustCompile(`cmdstat_(\w+):calls=(\d+),usec=\d+,usec_per_call=([\d.]+)`)

// serverTime resets the server's command statistics and returns a function
// reading them: calls and server time per call, by command.
func serverTime(b *testing.B, rdb *redis.Client) func() map[string]cmdStat {
	b.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return func() map[string]cmdStat {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		out := map[string]cmdStat{}
		for _, m := range cmdstatRE.FindAllStringSubmatch(info, -1) {
			calls, _ := strconv.ParseInt(m[2], 10, 64)
			per, _ := strconv.ParseFloat(m[3], 64)
			out[m[1]] = cmdStat{calls, per}
		}
		return out
	}
}
