package lockclient_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The holder process: this test binary run again with helperEnv set. It takes
// one lock (or a set), prints "token N", and prints "lost ..." when the lock's Done closes.
// Its keys live under the test's prefix (helperPrefixEnv) on a shared member.
const (
	helperEnv       = "LOCKCLIENT_TEST_HOLDER"
	helperPrefixEnv = "LOCKCLIENT_TEST_PREFIX"
)

// shared is the etcd member of the tests that neither count revisions nor
// stop a member; each test keeps its keys under a prefix of its own.
var shared = locktest.NewShared()

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHolder(spec))
	}
	parallelWaits()
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// parallelWaits lets up to 8 parallel tests run at once, not GOMAXPROCS, unless
// -parallel says how many: the tests that call t.Parallel here mostly wait
// out leases, using little CPU.
func parallelWaits() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "8")
	}
}

// holderEnv is the environment of a holder process that takes spec on srv.
func holderEnv(srv *locktest.Cluster, spec string) []string {
	return append(os.Environ(), helperEnv+"="+strings.Join(srv.Endpoints(), ",")+" "+spec, helperPrefixEnv+"="+srv.Prefix())
}

func runHolder(spec string) int {
	eps, name, _ := strings.Cut(spec, " ")
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	locktest.Namespace(cli, os.Getenv(helperPrefixEnv))
	c, err := lockclient.New(cli, lockclient.WithTTL(roomTTL), lockclient.WithObserver(termPrinter{}))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	// Bounded, so that a holder the test forgot cannot outlive it for long.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// "lead:NAME": Lead NAME, saying "token N" at each term and "lost" at its end.
	if n, ok := strings.CutPrefix(name, "lead:"); ok {
		err := c.Lead(ctx, n, func(term *lockclient.Lock) error {
			fmt.Println("token", term.Token())
			<-term.Done()
			cause := context.Cause(term.Context())
			fmt.Println("lost", errors.Is(cause, lockclient.ErrSessionLost), cause)
			return nil
		})
		fmt.Println("error", err)
		return 1
	}
	// "idle:NAME": the session idles first, and NAME is taken when an idle
	// renewal is nearly due (more than a busy interval after the last one).
	if n, ok := strings.CutPrefix(name, "idle:"); ok {
		name = n
		warm, err := c.Acquire(ctx, "warm-"+name)
		if err == nil {
			err = warm.Release(ctx)
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		time.Sleep(roomTTL * 9 / 10)
	}
	// "spin:NAME": after the grant, look at the lock the moment the process
	// wakes from a pause (spinUntilPaused).
	name, spin := strings.CutPrefix(name, "spin:")
	// A comma-separated name is a set (AcquireSet); "permit:NAME:N" a permit.
	var l *lockclient.Lock
	if sem, ok := strings.CutPrefix(name, "permit:"); ok {
		sem, n, _ := strings.Cut(sem, ":")
		k, _ := strconv.Atoi(n)
		l, err = c.AcquirePermit(ctx, sem, k)
	} else if strings.Contains(name, ",") {
		l, err = c.AcquireSet(ctx, strings.Split(name, ","))
	} else {
		l, err = c.Acquire(ctx, name)
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	granted := time.Now() // before the test may freeze the process, which it does on "token"
	fmt.Println("token", l.Token())
	if spin {
		return spinUntilPaused(ctx, l, granted)
	}
	select {
	case <-l.Done():
		fmt.Println("lost", context.Cause(l.Context()), "checkgrant:", fence.CheckGrant(l))
	case <-ctx.Done():
	}
	return 0
}

// spinUntilPaused reads the clock in a loop from last on, never sleeping,
// until it jumps by more than the lease (the process was frozen), then at once
// says whether the lock's Context is cancelled and Done closed: "woke ctx=ERR
// done=BOOL". It gives up when ctx ends, so that it spins no longer than the
// process may live.
func spinUntilPaused(ctx context.Context, l *lockclient.Lock, last time.Time) int {
	for ctx.Err() == nil {
		now := time.Now()
		if now.Sub(last) > roomTTL {
			err := l.Context().Err()
			done := false
			select {
			case <-l.Done():
				done = true
			default:
			}
			fmt.Printf("woke ctx=%v done=%v\n", err, done)
			return 0
		}
		last = now
	}
	fmt.Println("error: never frozen")
	return 1
}

// termPrinter says how each term of a leading holder process ended.
type termPrinter struct{}

func (termPrinter) Acquired(string, time.Duration, error)           {}
func (termPrinter) Ended(string, fence.Token, time.Duration, error) {}
func (termPrinter) KeepAlive(time.Duration, error)                  {}
func (termPrinter) Session(int, error)                              {}
func (termPrinter) Retried(string, error)                           {}
func (termPrinter) TermBegun(string, fence.Token)                   {}
func (termPrinter) TermEnded(_ string, tok fence.Token, _ time.Duration, cause string) {
	fmt.Println("ended", tok, cause)
}
