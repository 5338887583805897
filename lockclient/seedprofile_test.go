package lockclient_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sideUsage is what one side of the seed benchmark uses: the clients (this
// process) or the etcd members (their own processes, summed).
type sideUsage struct {
	goroutines float64
	heap       float64 // live heap bytes
	cpu        time.Duration
	renewals   float64 // leases renewed (etcd counts each on the leader)
	kaRecv     float64 // keepalive requests the members received
	kaLeader   float64 // of them, those the leader received (the rest it had forwarded)
	kaStreams  float64 // keepalive streams the members opened
	leaderCPU  time.Duration
}

// The members' gRPC counters of the LeaseKeepAlive method.
const (
	kaRecvMetric   = `grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`
	kaStartedMetic = `grpc_server_started_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`
)

// clientUsage measures this process: the workers' clients and the benchmark.
func clientUsage() sideUsage {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return sideUsage{goroutines: float64(runtime.NumGoroutine()), heap: float64(ms.HeapAlloc), cpu: processCPU()}
}

// etcdUsage sums the members' own accounts of themselves, from the /metrics
// endpoint each serves on its client URL.
func etcdUsage(b *testing.B, endpoints []string) sideUsage {
	b.Helper()
	var u sideUsage
	for _, ep := range endpoints {
		m, err := scrapeMetrics(b.Context(), ep+"/metrics")
		if err != nil {
			b.Fatalf("member metrics: %v", err)
		}
		u.goroutines += m["go_goroutines"]
		u.heap += m["go_memstats_heap_alloc_bytes"]
		u.cpu += time.Duration(m["process_cpu_seconds_total"] * float64(time.Second))
		u.renewals += m["etcd_debugging_lease_renewed_total"]
		u.kaRecv += m[kaRecvMetric]
		u.kaStreams += m[kaStartedMetic]
		if m["etcd_server_is_leader"] == 1 {
			u.kaLeader += m[kaRecvMetric]
			u.leaderCPU += time.Duration(m["process_cpu_seconds_total"] * float64(time.Second))
		}
	}
	return u
}

// scrapeMetrics reads the samples of a Prometheus text exposition, each under
// its name with its labels as written.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if i := strings.LastIndex(sc.Text(), "} "); i >= 0 {
			name, val, ok = sc.Text()[:i+1], sc.Text()[i+2:], true
		}
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

func startProfile(b *testing.B, path string) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
