//go:build unix

package lockclient_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestLock_set_frozenHolder freezes a process holding the set {a,b} with SIGSTOP
// past its session lease: a single lock on a and another on b are granted with
// higher tokens, and the thawed holder finds its whole set lost.
func TestLock_set_frozenHolder(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	h := startHolder(t, srv, "set-b,set-a")
	other := newClient(t, srv.Client(t))
	if _, err := other.TryAcquire(t.Context(), "set-b"); err == nil {
		t.Fatal("b free while the set holder runs")
	}
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"set-a", "set-b"} {
		l := mustAcquire(t, other, n)
		if l.Token() <= h.token {
			t.Fatalf("%s: token %d after the frozen set's %d", n, l.Token(), h.token)
		}
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line := h.next(t)
	// The set's Resource is its first name in sorted order.
	want := fmt.Sprintf("checkgrant: fence: lock lost: %q at token %d", "set-a", h.token)
	if !strings.HasPrefix(line, "lost") || !strings.Contains(line, want) {
		t.Fatalf("thawed holder said %q, want its set lost and refused by CheckGrant", line)
	}
	for h.lines.Scan() {
	}
	h.cmd.Wait()
}
