//go:build unix

package lockclient_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type holderProc struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
	token fence.Token
}

func startHolder(t *testing.T, srv *locktest.Cluster, name string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = holderEnv(srv, name)
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
		if strings.HasPrefix(line, "token ") || strings.HasPrefix(line, "lost") || strings.HasPrefix(line, "ended") || strings.HasPrefix(line, "error") || strings.HasPrefix(line, "woke") {
			return line
		}
	}
	t.Fatalf("holder process ended without a word: %v", h.lines.Err())
	return ""
}

// TestClient_crashedHolder kills the holding process outright: its lease expires
// and the lock passes on with a higher token.
func TestClient_crashedHolder(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
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
// write would be refused before any I/O. The holder takes its lock on a new
// session, or on one that idled first (renewing at the idle cadence), just
// before an idle renewal was due.
func TestClient_frozenHolder(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"account-78", "idle:account-79"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			srv := shared.Cluster(t)
			name := strings.TrimPrefix(spec, "idle:")
			h := startHolder(t, srv, spec)
			other := newClient(t, srv.Client(t))
			if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			l := mustAcquire(t, other, name)
			if l.Token() <= h.token {
				t.Fatalf("token %d after the frozen holder's %d", l.Token(), h.token)
			}
			if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			line := h.next(t)
			if !strings.HasPrefix(line, "lost") || !strings.Contains(line, fmt.Sprintf("checkgrant: fence: lock lost: %q at token %d", name, h.token)) {
				t.Fatalf("thawed holder said %q, want its lock lost and refused by CheckGrant", line)
			}
			for h.lines.Scan() { // drain, so that Wait can return
			}
			if err := h.cmd.Wait(); err != nil {
				t.Fatalf("thawed holder: %v", err)
			}
			// The thawed holder's lease is gone; the new holder is untouched.
			if info, err := other.Holder(t.Context(), name); err != nil || info.Token != l.Token() {
				t.Fatalf("Holder after thaw = %+v, %v; want token %d", info, err, l.Token())
			}
		})
	}
}

// TestLead_frozenCause freezes a leading process past its lease, again and
// again, with nobody touching its key: each term ends as the lease's loss
// (lease_expired, ErrSessionLost), never as a key deleted by someone else,
// whichever the thawed process notices first (the watch's DELETE or its
// session deadline); then it leads again with a higher token.
//
// The bug it guards: a term whose key went with its expired lease told as
// key_deleted. Code without the lease check in keyGone told about one freeze
// in 16 so; TestClient_Lead_leaseRevoked catches that bug every time, so a few
// freezes here only keep the real freeze and thaw covered.
func TestLead_frozenCause(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	h := startHolder(t, srv, "lead:scheduler")
	tok := h.token
	freezes := 8
	if testing.Short() {
		freezes = 3
	}
	for i := range freezes {
		if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitTokenGone(t, cli, defaultPrefix+"scheduler", tok)
		if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		lost, ended, next := h.next(t), h.next(t), h.next(t)
		if !strings.HasPrefix(lost, "lost true ") || ended != fmt.Sprintf("ended %d lease_expired", tok) {
			t.Fatalf("freeze %d: term %d ended with %q, %q; want ErrSessionLost and lease_expired", i, tok, lost, ended)
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(next, "token "), 10, 64)
		if err != nil || fence.Token(n) <= tok {
			t.Fatalf("freeze %d: after term %d the process said %q, want a higher term", i, tok, next)
		}
		tok = fence.Token(n)
	}
}

// TestLock_Context_endedOnWaking freezes a holder process that reads its
// clock in a loop (spinUntilPaused), keeps it frozen past its lease and thaws
// it: the first thing it does on waking, before its session's timer may have
// run, is look at its lock, and finds its Context cancelled and Done closed.
//
// The bug it guards: a job that checked l.Context().Err() right after a pause
// could find nil, the clock's timer not having run yet, and go on to write
// (seen once in about five runs of the scenario kit's SQLite job styles).
func TestLock_Context_endedOnWaking(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	cli := srv.Client(t)
	h := startHolder(t, srv, "spin:account-80")
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitTokenGone(t, cli, defaultPrefix+"account-80", h.token)
	time.Sleep(roomTTL) // the clock jumps by more than the lease: the process knows it slept
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got, want := h.next(t), "woke ctx=context canceled done=true"; got != want {
		t.Fatalf("the thawed holder said %q, want %q", got, want)
	}
}

// waitTokenGone waits until no key of key's line carries tok (its lease
// expired). A term may hold through its place in line rather than through key
// itself: when the process campaigned again before etcd expired its lost
// session's key, it queued, dropped that key and held through its place.
func waitTokenGone(t *testing.T, cli *clientv3.Client, key string, tok fence.Token) {
	t.Helper()
	for {
		resp, err := cli.Get(t.Context(), key, clientv3.WithRange(key+"\x01"))
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		if !slices.ContainsFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return fence.Token(kv.CreateRevision) == tok }) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
