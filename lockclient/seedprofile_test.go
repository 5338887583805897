package lockclient_test

import (
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serverSide tells the embedded etcd members' code (server, raft, storage,
// gRPC's server transport) from the clients' in a stack.
func serverSide(stack string) bool {
	for _, s := range []string{"go.etcd.io/etcd/server/", "go.etcd.io/raft/", "go.etcd.io/bbolt", "http2Server", "grpc.(*Server)"} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// goroutinesBySide counts the process's goroutines: [0] the clients', [1] the
// embedded members'.
func goroutinesBySide() (n [2]int) {
	buf := make([]byte, 256<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if serverSide(g) {
			n[1]++
		} else {
			n[0]++
		}
	}
	return n
}

// heapBySide estimates the live heap by where it was allocated, from the
// runtime's sampled heap profile scaled as pprof scales it: [0] the clients',
// [1] the embedded members'.
func heapBySide() (bytes [2]float64) {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(recs, false)
		if ok {
			recs = recs[:n]
			break
		}
		recs = make([]runtime.MemProfileRecord, n+100)
	}
	rate := float64(runtime.MemProfileRate)
	for _, r := range recs {
		if r.AllocObjects == 0 || r.InUseBytes() == 0 {
			continue
		}
		avg := float64(r.AllocBytes) / float64(r.AllocObjects)
		scaled := float64(r.InUseBytes()) / (1 - math.Exp(-avg/rate))
		var sb strings.Builder
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			sb.WriteString(f.Function)
			sb.WriteByte('\n')
			if !more {
				break
			}
		}
		if serverSide(sb.String()) {
			bytes[1] += scaled
		} else {
			bytes[0] += scaled
		}
	}
	return bytes
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
