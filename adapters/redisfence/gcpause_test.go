//go:build unix

package redisfence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// childEnv, when set, makes the test binary run as the first lock holder of the
// GC-pause timeline (runChild) instead of running tests. Its value is "fenced",
// "plain" or "permit" (fenced, holding a permit of 2), the etcd endpoints, the Redis address, the resource and the key.
const childEnv = "REDISFENCE_TEST_CHILD"

// pauseTTL is holder 1's session lease: how long it keeps the lock once frozen.
const pauseTTL = 2 * time.Second

// TestStore_Set_gcPause plays the GC-pause timeline with real processes and a real
// etcd: holder 1, a child process, takes the lock and prepares its report; it is
// frozen with SIGSTOP; its session lease runs out and holder 2 takes the lock with
// a higher token and writes its report to Redis; holder 1 is resumed with SIGCONT
// and writes at once, presenting its token as a bare grant (a holder that has not
// noticed its loss). Fenced, the stale write is refused and holder 2's report
// stands; with a plain SET the stale report overwrites it.
func TestStore_Set_gcPause(t *testing.T) {
	tests := []struct {
		mode      string
		staleWins bool
	}{
		{"fenced", false},
		{"plain", true},
	}
	etcd := locktest.Start(t)
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			e := newEnv(t)
			res := e.res("nightly-report")
			key := e.key(res, "report")
			child := startHolder(t, tt.mode, etcd.Endpoints(), node.Addr, res, key)
			if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			locks, err := lockclient.New(etcd.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { locks.Close() })
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			lock, err := locks.Acquire(ctx, res) // waits for the frozen holder's lease to run out
			if err != nil {
				t.Fatalf("holder 2 Acquire: %v", err)
			}
			if lock.Token() <= child.token {
				t.Fatalf("holder 2 token %d not above holder 1's %d", lock.Token(), child.token)
			}
			report := fmt.Sprintf("report by holder 2, token %d", lock.Token())
			if err := e.store.Set(t.Context(), lock, key, report, 0); err != nil {
				t.Fatalf("holder 2 Set: %v", err)
			}
			// The write command waits in the pipe: holder 1's first act on waking.
			if _, err := io.WriteString(child.stdin, "write\n"); err != nil {
				t.Fatal(err)
			}
			if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			result := child.next(t, "result ")
			stored, _ := e.get(t, key)
			t.Logf("holder 1 (token %d): %s; stored: %q (mark %d)", child.token, result, stored, e.mark(t, res))
			if tt.staleWins {
				if result != "accepted" || !strings.Contains(stored, "holder 1") {
					t.Fatalf("plain SET: holder 1 %s, stored %q; want the stale report to overwrite", result, stored)
				}
				return
			}
			want := fmt.Sprintf("refused stale seen=%d presented=%d", lock.Token(), child.token)
			if result != want || stored != report || e.mark(t, res) != lock.Token() {
				t.Fatalf("holder 1 %q, stored %q, mark %d; want %q and holder 2's report", result, stored, e.mark(t, res), want)
			}
		})
	}
}

type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	token fence.Token
}

func startHolder(t *testing.T, mode string, etcd []string, addr, res, key string) *holderProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{mode, strings.Join(etcd, ","), addr, res, key}, " "))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start holder 1: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	h := &holderProc{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(out)}
	n, err := strconv.ParseInt(h.next(t, "token "), 10, 64)
	if err != nil {
		t.Fatalf("holder 1 token: %v", err)
	}
	h.token = fence.Token(n)
	h.next(t, "ready")
	return h
}

// next returns the rest of the holder's next line that starts with prefix.
func (h *holderProc) next(t *testing.T, prefix string) string {
	t.Helper()
	for h.lines.Scan() {
		if rest, ok := strings.CutPrefix(h.lines.Text(), prefix); ok {
			return rest
		}
		if strings.HasPrefix(h.lines.Text(), "error") {
			t.Fatalf("holder 1: %s", h.lines.Text())
		}
	}
	t.Fatalf("holder 1 ended before %q: %v", prefix, h.lines.Err())
	return ""
}

// runChild is holder 1: it takes the lock, prepares its report, says ready, and
// writes when told to (the parent freezes it in between). It returns the exit code.
func runChild() int {
	if err := child(os.Getenv(childEnv)); err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	return 0
}

func child(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 5 {
		return fmt.Errorf("%s=%q: want mode, etcd, redis, resource, key", childEnv, spec)
	}
	mode, etcd, addr, res, key := f[0], strings.Split(f[1], ","), f[2], f[3], f[4]
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	locks, err := lockclient.New(cli, lockclient.WithTTL(pauseTTL))
	if err != nil {
		return err
	}
	defer locks.Close()
	var lock *lockclient.Lock
	if mode == "permit" { // one of 2 permits of semaphore res: its first slot
		lock, err = locks.AcquirePermit(ctx, res, 2)
	} else {
		lock, err = locks.Acquire(ctx, res)
	}
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	store, err := redisfence.New(rdb)
	if err != nil {
		return err
	}
	report := fmt.Sprintf("report by holder 1, token %d", lock.Token())
	fmt.Printf("token %d\nready\n", lock.Token())
	stdin := bufio.NewScanner(os.Stdin)
	if !stdin.Scan() || stdin.Text() != "write" {
		return errors.New("no write command")
	}
	if mode == "plain" {
		err = rdb.Set(ctx, key, report, 0).Err()
	} else {
		// A bare grant: the holder that has not noticed its lock is lost.
		err = store.Set(ctx, fence.NewGrant(lock.Resource(), lock.Token()), key, report, 0)
	}
	var se *fence.StaleError
	switch {
	case err == nil:
		fmt.Println("result accepted")
	case errors.As(err, &se):
		fmt.Printf("result refused stale seen=%d presented=%d\n", se.Seen, se.Presented)
	default:
		fmt.Printf("result error %v\n", err)
	}
	return nil
}
