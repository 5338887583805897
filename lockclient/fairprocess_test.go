//go:build unix

package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// startWaiterProcess starts runHolder's process (main_test.go) acquiring name
// on a session of roomTTL, and returns at once: the
// process waits in line. It is continued and killed when t ends.
func startWaiterProcess(t *testing.T, srv *locktest.Cluster, name string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = holderEnv(srv, name)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr // its "error" line, if any, in the test's log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start waiter process: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestClient_Acquire_lostWaiter puts a waiter process in a line of four, at
// the head or in the middle, and crashes it (SIGKILL) or freezes it (SIGSTOP,
// as a GC pause or a stalled VM would) before the holder releases: its place
// goes with its session lease, and the other waiters are granted in line order
// with their places' tokens, never two at once. A frozen head first becomes the
// holder, for no longer than what is left of its lease.
func TestClient_Acquire_lostWaiter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		at     int // the process's place in line
		frozen bool
	}{
		{"crashed/head", syscall.SIGKILL, 0, false},
		{"crashed/middle", syscall.SIGKILL, 1, false},
		{"frozen/head", syscall.SIGSTOP, 0, true},
		{"frozen/middle", syscall.SIGSTOP, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const name, places = "lost-waiter", 4
			srv := shared.Cluster(t)
			f := newFairLine(t, srv, 1)
			h := f.client("holder")
			hl := mustAcquire(t, h, name)
			f.inside.Add(1)
			var (
				proc *exec.Cmd
				ids  []string
				rest []int // the waiter goroutines, in line order
			)
			for i := range places {
				if i == tc.at {
					proc = startWaiterProcess(t, srv, name)
					ids = append(ids, "pid-"+strconv.Itoa(proc.Process.Pid))
				} else {
					id := fmt.Sprintf("waiter-%d", i)
					c := f.client(id)
					rest = append(rest, f.start(func(ctx context.Context) (*lockclient.Lock, error) { return c.Acquire(ctx, name) }))
					ids = append(ids, id)
				}
				waitLine(t, h, name, ids...)
			}
			line := waitLine(t, h, name, ids...)
			tokens := map[int]fence.Token{}
			for k, idx := range rest {
				tokens[idx] = line[k+boolInt(k >= tc.at)].Token
			}

			if err := proc.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			f.release(hl)
			if tc.frozen && tc.at == 0 {
				// The frozen head holds until its lease runs out.
				info := waitHolderToken(t, h, name, hl.Token())
				if info.PID != proc.Process.Pid || info.Token != line[0].Token {
					t.Fatalf("after the release the holder is %s token %d, want the frozen head %s token %d", who(info), info.Token, ids[0], line[0].Token)
				}
				if info.LeaseLeft > roomTTL {
					t.Fatalf("the frozen head's lease has %v left, more than its TTL %v", info.LeaseLeft, roomTTL)
				}
			}
			f.release(f.expect(rest, hl.Token(), tokens))
			t.Logf("the line passed the %s waiter in %v (its session TTL %v)", tc.name, time.Since(released), roomTTL)
			if _, err := h.Holder(t.Context(), name); !errors.Is(err, lockclient.ErrNotHeld) {
				t.Fatalf("Holder after the line = %v, want ErrNotHeld", err)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitHolderToken waits until Holder of name shows a holder other than the
// token old, and returns it.
func waitHolderToken(t *testing.T, c *lockclient.Client, name string, old fence.Token) lockclient.Info {
	t.Helper()
	for deadline := time.Now().Add(lineBound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		info, err := c.Holder(t.Context(), name)
		if err == nil && info.Token != old {
			return info
		}
	}
	t.Fatalf("Holder(%q) still showed token %d (or nobody)", name, old)
	return lockclient.Info{}
}
