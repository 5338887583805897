//go:build unix

package lockclient_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The holder process: this test binary run again with helperEnv set. It takes
// one lock, prints "token N", and prints "lost" when the lock's Done closes.
const helperEnv = "LOCKCLIENT_TEST_HOLDER"

func TestHelperHolder(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for the crash and freeze tests")
	}
	eps, name, _ := strings.Cut(spec, " ")
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	c, err := lockclient.New(cli, lockclient.WithTTL(testTTL))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l, err := c.Acquire(ctx, name)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("token", l.Token())
	select {
	case <-l.Done():
		fmt.Println("lost", context.Cause(l.Context()), "checkgrant:", fence.CheckGrant(l))
	case <-ctx.Done():
	}
	os.Exit(0)
}

type holderProc struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	token fence.Token
}

func startHolder(t *testing.T, srv *locktest.Server, name string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(srv.Endpoints(), ",")+" "+name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder process: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	h := &holderProc{cmd: cmd, lines: bufio.NewScanner(out)}
	line := h.next(t)
	v, ok := strings.CutPrefix(line, "token ")
	n, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		t.Fatalf("holder process said %q, want its token", line)
	}
	h.token = fence.Token(n)
	return h
}

func (h *holderProc) next(t *testing.T) string {
	t.Helper()
	for h.lines.Scan() {
		line := h.lines.Text()
		if strings.HasPrefix(line, "token ") || strings.HasPrefix(line, "lost") || strings.HasPrefix(line, "error") {
			return line
		}
	}
	t.Fatalf("holder process ended without a word: %v", h.lines.Err())
	return ""
}

// TestClient_crashedHolder kills the holding process outright: its lease expires
// and the lock passes on with a higher token.
func TestClient_crashedHolder(t *testing.T) {
	srv := locktest.Start(t)
	h := startHolder(t, srv, "account-77")
	other := newClient(t, srv.Client(t))
	if _, err := other.TryAcquire(t.Context(), "account-77"); err == nil {
		t.Fatal("lock free while the holder process runs")
	}
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, other, "account-77")
	if l.Token() <= h.token {
		t.Fatalf("token %d after the crashed holder's %d", l.Token(), h.token)
	}
}

// TestClient_frozenHolder freezes the holding process with SIGSTOP, the way a
// long GC pause or a suspended VM does: its keepalives stop, its lease expires,
// the lock passes on. When it thaws, its lock's Done is closed and a fenced
// write would be refused before any I/O.
func TestClient_frozenHolder(t *testing.T) {
	srv := locktest.Start(t)
	h := startHolder(t, srv, "account-78")
	other := newClient(t, srv.Client(t))
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, other, "account-78")
	if l.Token() <= h.token {
		t.Fatalf("token %d after the frozen holder's %d", l.Token(), h.token)
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line := h.next(t)
	if !strings.HasPrefix(line, "lost") || !strings.Contains(line, "checkgrant: "+(&fence.LostError{Resource: "account-78", Token: h.token}).Error()) {
		t.Fatalf("thawed holder said %q, want its lock lost and refused by CheckGrant", line)
	}
	for h.lines.Scan() { // drain, so that Wait can return
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("thawed holder: %v", err)
	}
	// The thawed holder's lease is gone; the new holder is untouched.
	if info, err := other.Holder(t.Context(), "account-78"); err != nil || info.Token != l.Token() {
		t.Fatalf("Holder after thaw = %+v, %v; want token %d", info, err, l.Token())
	}
}
