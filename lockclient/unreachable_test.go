package lockclient_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// closedAddr returns a local address that accepts no connection.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestClient_unreachableWaitLogged: an Acquire with a context without deadline, against
// an address that accepts no connection, says that it waits once per interval
// (after the first), in the log (Warn, naming the endpoint and the connection
// error) and to the Observer (Retried "connect"), until its ctx is cancelled.
func TestClient_unreachableWaitLogged(t *testing.T) {
	const every = 200 * time.Millisecond
	addr := closedAddr(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	logs := &logBuffer{}
	obs := &recorder{}
	c := newClient(t, cli, lockclient.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))), lockclient.WithObserver(obs))
	lockclient.SetUnreachableEvery(c, every)

	ctx, cancel := context.WithCancel(context.Background()) // no deadline: only the cancel ends it
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "job")
		res <- err
	}()
	waits := func() []map[string]any {
		return slices.DeleteFunc(logs.records(t), func(r map[string]any) bool { return r["msg"] != "etcd unreachable, waiting" })
	}
	for deadline := time.Now().Add(2 * time.Minute); len(waits()) < 3; time.Sleep(every / 4) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waits logged; log:\n%s", len(waits()), logs.buf.String())
		}
	}
	cancel()
	select {
	case err := <-res:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Acquire did not return after its ctx was cancelled")
	}
	ws := waits()
	for _, w := range ws {
		if w["level"] != "WARN" || w["endpoints"] != addr || !strings.Contains(w["error"].(string), "connection refused") {
			t.Fatalf("wait logged as %v; want WARN with endpoints %q and the connection error", w, addr)
		}
	}
	obs.mu.Lock()
	retried := slices.Clone(obs.retried)
	obs.mu.Unlock()
	if n := len(retried); n < len(ws) || slices.ContainsFunc(retried, func(op string) bool { return op != "connect" }) {
		t.Fatalf("Observer told Retried %q, want \"connect\" once per logged wait (%d)", retried, len(ws))
	}
	t.Logf("%d waits logged, the first: %v", len(ws), ws[0])
}
