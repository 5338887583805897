package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// embeddedEtcd is a real single-member etcd server running inside the example's
// process, so that it needs nothing installed. The lock clients reach it over
// loopback TCP exactly as they would reach a cluster.
type embeddedEtcd struct {
	etcd      *embed.Etcd
	dir       string
	endpoints []string
}

// startEtcd starts an embedded etcd with its data in a fresh temporary directory and
// its client and peer URLs on free loopback ports. It returns once the member serves
// requests, or an error when it did not become ready before ctx ended.
func startEtcd(ctx context.Context) (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "s3report-etcd-")
	if err != nil {
		return nil, fmt.Errorf("etcd: data directory: %w", err)
	}
	// Free ports are picked by binding to port 0 and releasing them; another process
	// may take one in between, so a failed start is retried on new ports.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := startEtcdOnce(ctx, dir, attempt)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func startEtcdOnce(ctx context.Context, dir string, attempt int) (*embeddedEtcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, fmt.Errorf("etcd: free ports: %w", err)
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}

	cfg := embed.NewConfig()
	cfg.Name = "s3report"
	cfg.Dir = fmt.Sprintf("%s/member-%d", dir, attempt)
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// The timeline is the example's output; etcd's own log would bury it.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Throwaway data: fsync buys nothing here and costs tens of milliseconds per
	// write on a shared disk.
	cfg.UnsafeNoFsync = true
	cfg.EnableGRPCGateway = false

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd: serving: %w", err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("etcd: the embedded member was not ready after 30 s")
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcd: start: %w", ctx.Err())
	}
	return &embeddedEtcd{etcd: e, dir: dir, endpoints: []string{clientURL.String()}}, nil
}

// Endpoints returns the client URLs the lock clients connect to.
func (e *embeddedEtcd) Endpoints() []string { return e.endpoints }

// Close stops the member and removes its data directory.
func (e *embeddedEtcd) Close() {
	e.etcd.Close()
	os.RemoveAll(e.dir)
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
