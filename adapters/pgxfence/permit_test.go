package pgxfence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"github.com/fencegate/fencegate/testserver"
)

// A permit process is this test binary re-executed with permitChildEnv set to
// "frozen" (one permit, one write after it is resumed) or a worker's name
// (permits and writes until its stdin closes).
const (
	permitChildEnv = "PGXFENCE_PERMIT_CHILD"
	permitDSNEnv   = "PGXFENCE_PERMIT_DSN"
	permitEtcdEnv  = "PGXFENCE_PERMIT_ETCD"
	permitTableEnv = "PGXFENCE_PERMIT_TABLE"
	permitN        = 3
	permitTTL      = 2 * time.Second
)

// permitPiece is one fenced write of a permit's holder: a row with its slot,
// token and the server's clock at its start and end, so the store's side tells
// how many holders wrote at once.
func permitPiece(ctx context.Context, tx pgx.Tx, tbl, who string, p *lockclient.Lock) error {
	var start time.Time
	if err := tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&start); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.005)"); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+tbl+" (slot, token, worker, t_start, t_end) VALUES ($1, $2, $3, $4, clock_timestamp())",
		p.Resource(), int64(p.Token()), who, start)
	return err
}

func permitChild() int {
	who, tbl := os.Getenv(permitChildEnv), os.Getenv(permitTableEnv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := pgxpool.ParseConfig(os.Getenv(permitDSNEnv))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer pool.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv(permitEtcdEnv), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer cli.Close()
	lc, err := lockclient.New(cli, lockclient.WithTTL(permitTTL), lockclient.WithIdentity(who))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer lc.Close()
	store := newStore(pool)
	if who == "frozen" {
		p, err := lc.AcquirePermit(ctx, tbl, permitN)
		if err == nil {
			// Frozen inside fn, before its first statement: its grant passed
			// fence.Exec's check; only the store can refuse it now.
			err = fence.Exec(ctx, store, p, func(tx pgx.Tx) error {
				fmt.Println(testserver.ChildReadyLine)
				_, _ = io.Copy(io.Discard, os.Stdin)
				return permitPiece(ctx, tx, tbl, who, p)
			})
		}
		fmt.Printf("frozen stale=%v err=%v\n", errors.Is(err, fence.ErrStale), err)
		return 0
	}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	return permitWorker(ctx, lc, store, tbl, who)
}

// permitWorker takes a permit, writes three pieces under it and releases it,
// until ctx ends; it prints its counts.
func permitWorker(ctx context.Context, lc *lockclient.Client, store *pgxfence.Store, tbl, who string) int {
	var wrote, refused int
	for ctx.Err() == nil {
		p, err := lc.AcquirePermit(ctx, tbl, permitN)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			fmt.Println("error", err)
			return 1
		}
		for range 3 {
			err := fence.Exec(ctx, store, p, func(tx pgx.Tx) error { return permitPiece(ctx, tx, tbl, who, p) })
			switch {
			case err == nil:
				wrote++
			case errors.Is(err, fence.ErrStale), errors.Is(err, fence.ErrLost):
				refused++ // this worker's own lease ran out under load: refused, as it must be
			case ctx.Err() != nil:
			default:
				fmt.Println("error", err)
				return 1
			}
		}
		_ = p.Release(context.Background()) // bounded by the TTL
	}
	fmt.Printf("done wrote=%d refused=%d\n", wrote, refused)
	return 0
}

type permitProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startPermitWorker(t *testing.T, env []string, who string) *permitProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), permitChildEnv+"="+who)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &permitProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
}

// finish closes the worker's stdin and returns its last line.
func (p *permitProc) finish(t *testing.T) string {
	t.Helper()
	_ = p.stdin.Close()
	last := ""
	for p.out.Scan() {
		last = p.out.Text()
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("worker: %v (%q)", err, last)
	}
	return last
}

// waitUntil polls cond until it holds; go test's -timeout ends a broken build.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-t.Context().Done():
			t.Fatalf("never: %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestPermit_processes: 8 processes contend for permits of n=3 and write
// through fence.Exec; one freezes (SIGSTOP) past its lease inside a fenced
// write, one is killed (SIGKILL). Counted from PostgreSQL's side, at most 3
// fenced transactions ever overlap; the frozen holder, resumed, is refused
// fence.ErrStale at the store while the others keep writing.
func TestPermit_processes(t *testing.T) {
	srv := locktest.Start(t)
	pool := newPool(t)
	ctx := t.Context()
	tbl := fmt.Sprintf("permit_log_%d", time.Now().UnixNano())
	mustExec(t, pool, "CREATE TABLE "+tbl+" (id bigserial PRIMARY KEY, slot text NOT NULL, token bigint NOT NULL, "+
		"worker text NOT NULL, t_start timestamptz NOT NULL, t_end timestamptz NOT NULL)")
	env := []string{permitDSNEnv + "=" + pool.Config().ConnConfig.ConnString(),
		permitEtcdEnv + "=" + strings.Join(srv.Endpoints(), ","), permitTableEnv + "=" + tbl}

	frozen := testserver.StartFrozen(t, append(env, permitChildEnv+"=frozen"))
	lc, err := lockclient.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	held, err := lc.List(ctx)
	held = slices.DeleteFunc(held, func(in lockclient.Info) bool { return in.Semaphore != tbl })
	if err != nil || len(held) != 1 || held[0].ClientID != "frozen" {
		t.Fatalf("List = %+v, %v; want the frozen holder's permit", held, err)
	}
	slot, token := held[0].Name, held[0].Token
	workers := make([]*permitProc, 7)
	for i := range workers {
		workers[i] = startPermitWorker(t, env, fmt.Sprintf("worker-%d", i))
	}
	rows := func() int64 { return mustInt(t, pool, "SELECT count(*) FROM "+tbl) }

	// The frozen holder's lease runs out, its slot passes on, and its successor writes.
	waitUntil(t, "a successor wrote the frozen holder's slot", func() bool { return stored(t, pool, slot) > token })
	if err := workers[0].cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = workers[0].cmd.Wait()
	n := rows()
	waitUntil(t, "the others write on after the kill", func() bool { return rows() >= n+30 })
	if out := frozen.Resume(t); !strings.Contains(out, "stale=true") {
		t.Fatalf("the resumed frozen holder: %q, want its write refused with fence.ErrStale", out)
	}
	for _, w := range workers[1:] {
		if out := w.finish(t); !strings.HasPrefix(out, "done wrote=") || strings.HasPrefix(out, "done wrote=0 ") {
			t.Errorf("worker: %q, want writes", out)
		}
	}

	if got := mustInt(t, pool, "SELECT count(*) FROM "+tbl+" WHERE worker = 'frozen'"); got != 0 {
		t.Fatalf("%d rows of the frozen holder stored", got)
	}
	slots := []string{tbl + "/0000", tbl + "/0001", tbl + "/0002"}
	if got := mustInt(t, pool, "SELECT count(*) FROM "+tbl+" WHERE slot <> ALL($1)", slots); got != 0 {
		t.Fatalf("%d rows written under a slot above n", got)
	}
	// Per slot, a later write never carries a lower token.
	if got := mustInt(t, pool, "SELECT count(*) FROM "+tbl+" a JOIN "+tbl+" b ON a.slot = b.slot AND a.t_start < b.t_start AND a.token > b.token"); got != 0 {
		t.Fatalf("%d writes of a slot after a higher token's", got)
	}
	// The most fenced transactions running at one instant, by the server's clock.
	most := mustInt(t, pool, "SELECT max(c) FROM (SELECT (SELECT count(*) FROM "+tbl+" s WHERE s.t_start <= r.t_start AND s.t_end > r.t_start) AS c FROM "+tbl+" r) x")
	t.Logf("%d fenced writes, at most %d at once", rows(), most)
	if most > permitN {
		t.Fatalf("%d fenced writes at once, more than the %d permits", most, permitN)
	}
	if most < 2 {
		t.Fatalf("at most %d write at once: the run never had permits held together, the check proved nothing", most)
	}
}
