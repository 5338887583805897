//go:build unix

package redisfence_test

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// TestStore_Set_frozenPermit: a permit's holder (a child process, slot 0 of a
// semaphore of 2) is frozen past its lease; its slot passes on with a higher
// token and the successor writes. Resumed, the frozen holder's write is refused
// at Redis as stale, while the holder of the other permit writes on throughout.
func TestStore_Set_frozenPermit(t *testing.T) {
	etcd := locktest.Start(t)
	e := newEnv(t)
	sem := e.res("exports")
	slot0, slot1 := sem+"/0000", sem+"/0001"
	key0, key1 := e.key(slot0, "part"), e.key(slot1, "part")
	child := startHolder(t, "permit", etcd.Endpoints(), node.Addr, sem, key0)
	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	locks, err := lockclient.New(etcd.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locks.Close() })
	other, err := locks.AcquirePermit(t.Context(), sem, 2)
	if err != nil || other.Resource() != slot1 {
		t.Fatalf("the other permit: %v, %v; want %s", other, err, slot1)
	}
	write := func(l *lockclient.Lock, key string, i int) {
		t.Helper()
		if err := e.store.Set(t.Context(), l, key, fmt.Sprintf("part %d by token %d", i, l.Token()), 0); err != nil {
			t.Fatalf("Set by %s (token %d): %v", l.Resource(), l.Token(), err)
		}
	}
	write(other, key1, 0)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	next, err := locks.AcquirePermit(ctx, sem, 2) // waits for the frozen holder's lease to run out
	if err != nil || next.Resource() != slot0 || next.Token() <= child.token {
		t.Fatalf("successor permit: %v, %v; want %s above token %d", next, err, slot0, child.token)
	}
	write(next, key0, 1)
	write(other, key1, 2)
	if _, err := io.WriteString(child.stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	result := child.next(t, "result ")
	want := fmt.Sprintf("refused stale seen=%d presented=%d", next.Token(), child.token)
	if result != want {
		t.Fatalf("frozen permit holder: %q, want %q", result, want)
	}
	write(other, key1, 3)
	if got, _ := e.get(t, key0); got != fmt.Sprintf("part 1 by token %d", next.Token()) {
		t.Fatalf("slot 0's value = %q, want the successor's", got)
	}
	if got, _ := e.get(t, key1); got != fmt.Sprintf("part 3 by token %d", other.Token()) {
		t.Fatalf("slot 1's value = %q, want the other holder's last", got)
	}
}
