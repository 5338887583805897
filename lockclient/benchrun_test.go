package lockclient_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Helpers of BenchmarkLockclient (bench_test.go).

// runTry holds name from a second session and counts the etcd revisions that
// benchTries refused try-acquires write.
func runTry(b *testing.B, p pairer, cli *clientv3.Client, name string) (revisions int64, elapsed time.Duration) {
	ctx := b.Context()
	rev := func() int64 {
		resp, err := cli.Get(ctx, "probe-revision")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	before := rev()
	start := time.Now()
	for range benchTries {
		if err := p.try(ctx, name); err != nil {
			b.Fatal(err)
		}
	}
	elapsed = time.Since(start)
	return rev() - before, elapsed
}

// alternate runs f then g in even rounds and g then f in odd ones, so that
// neither always runs right after the other's garbage. It counts the raft
// elections (a starved member misses heartbeats on a loaded machine) during
// each, because an election stalls whatever runs then.
func alternate(cl *locktest.Cluster, round int, f, g func(), rf, rg *result) {
	run := func(h func(), r *result) {
		t0 := cl.Term()
		h()
		r.elections += cl.Term() - t0
	}
	if round%2 == 1 {
		run(g, rg)
		run(f, rf)
		return
	}
	run(f, rf)
	run(g, rg)
}

// loadAvg reads the machine's 1-minute load average (Linux), reported with each
// phase: the machine is shared, and a phase run under load says so. It returns
// -1 where it cannot be read.
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, _, _ := strings.Cut(string(raw), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return -1
	}
	return v
}
