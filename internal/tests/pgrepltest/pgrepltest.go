// Package pgrepltest gives a test a throwaway PostgreSQL primary and a streaming
// standby made from it with pg_basebackup -R (Debian's postgresql package), the
// deployment a failover happens in: the standby can be frozen, the primary killed
// and the standby promoted.
//
//	pair := pgrepltest.Start(t, pgrepltest.Sync)
//	primary := pair.Primary.DSN() // writes wait for the standby ("standby" is sync)
//	pair.HoldReplication()       // commits now wait (Sync) or do not reach it (Async)
//	pair.KillPrimary(t)          // what was held is lost
//	pair.Promote(t)              // the standby takes writes
//
// The standby streams through a proxy the Pair holds, so replication can be held
// without freezing a process.
//
// Each pair belongs to one test and is stopped when it ends. Where PostgreSQL cannot be
// had, Start skips the test, or fails it when the environment variable CI is set.
package pgrepltest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/testserver"
	"github.com/fencegate/fencegate/testserver/delayproxy"
)

// Mode is how the primary waits for the standby on COMMIT.
type Mode int

const (
	// Async: COMMIT returns once the primary has the commit; the standby follows.
	Async Mode = iota
	// Sync: the standby is named in synchronous_standby_names; COMMIT waits until it
	// has flushed the commit's WAL (synchronous_commit = on).
	Sync
)

// StandbyName is the standby's application_name, the one synchronous_standby_names holds.
const StandbyName = "standby"

// Pair is a primary and its streaming standby.
type Pair struct {
	Primary, Standby *Node
	bin              string
	proxy            *delayproxy.Proxy // the standby's way to the primary
}

// Node is one PostgreSQL server of a Pair.
type Node struct {
	inst *testserver.Instance
	port int
	dsn  string
}

// DSN is a postgres:// URL for the node's postgres database, as user postgres.
func (n *Node) DSN() string { return n.dsn }

// HoldReplication stops the WAL flowing to the standby (held, not lost) until
// ResumeReplication: a Sync primary's COMMITs wait, an Async one's run ahead.
func (p *Pair) HoldReplication() { p.proxy.Pause() }

// ResumeReplication delivers what was held and lets the WAL flow again.
func (p *Pair) ResumeReplication() { p.proxy.Resume() }

// Start starts a primary and a standby streaming from it in mode, and waits until the
// standby streams (and, for Sync, is the synchronous one).
func Start(t testing.TB, mode Mode) *Pair {
	t.Helper()
	p, err := start(t, mode)
	if err != nil {
		testserver.Unavailable(t, "pgrepltest: no PostgreSQL primary and standby", err, "apt-get install postgresql")
	}
	return p
}

func start(t testing.TB, mode Mode) (*Pair, error) {
	bin, err := pgtest.BinDir()
	if err != nil {
		return nil, err
	}
	p := &Pair{bin: bin}
	sync := []string{"-c", "synchronous_standby_names=" + StandbyName}
	if mode == Async {
		sync = nil
	}
	if p.Primary, err = p.launch(t, "primary", sync, p.initdb); err != nil {
		return nil, err
	}
	if p.proxy, err = delayproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Primary.port)), 0); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = p.proxy.Close() })
	conninfo := fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=postgres application_name=%s", p.proxy.Port(), StandbyName)
	if p.Standby, err = p.launch(t, StandbyName, []string{"-c", conninfo}, p.basebackup); err != nil {
		return nil, err
	}
	want := "async"
	if mode == Sync {
		want = "sync"
	}
	return p, p.waitStreaming(t.Context(), want)
}

// launch makes a node's data directory with prepare and starts postgres on it, afresh
// on another port when another process takes the port first.
func (p *Pair) launch(t testing.TB, name string, extra []string, prepare func(dir, data string, cred *syscall.Credential) error) (*Node, error) {
	var n *Node
	err := startOnFreePorts(1, func(ports []int) error {
		var err error
		n, err = p.launchOn(t, name, extra, prepare, ports[0])
		return err
	})
	return n, err
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before postgres binds it.
var startOnFreePorts = testserver.StartOnFreePorts

// launchOn is one try of launch, on port.
func (p *Pair) launchOn(t testing.TB, name string, extra []string, prepare func(dir, data string, cred *syscall.Credential) error, port int) (*Node, error) {
	inst, err := testserver.NewInstance("postgres "+name, "fgrepl", "postgres")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		_ = inst.SignalAll(syscall.SIGCONT) // a frozen node cannot stop
		_ = inst.Stop(syscall.SIGQUIT)      // immediate shutdown: nothing here is kept
	})
	data := filepath.Join(inst.Dir, "data")
	if err := prepare(inst.Dir, data, inst.Cred); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logFile, err := os.Create(filepath.Join(inst.Dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	if inst.Cred != nil {
		_ = logFile.Chown(int(inst.Cred.Uid), int(inst.Cred.Gid))
	}
	args := append([]string{"-D", data, "-p", strconv.Itoa(port), "-k", inst.Dir,
		"-c", "cluster_name=" + filepath.Base(inst.Dir), // to tell it from a server that took its port
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off"}, extra...)
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	cmd.Dir = inst.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := inst.Start(cmd); err != nil {
		return nil, err
	}
	n := &Node{inst: inst, port: port, dsn: (&url.URL{Scheme: "postgres", User: url.User("postgres"),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres", RawQuery: "sslmode=disable"}).String()}
	if err := n.waitReady(t.Context(), filepath.Join(inst.Dir, "postgres.log")); err != nil {
		_ = inst.Stop(syscall.SIGQUIT)
		return nil, err
	}
	return n, nil
}

func (p *Pair) initdb(dir, data string, cred *syscall.Credential) error {
	return run(dir, cred, filepath.Join(p.bin, "initdb"), "-D", data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
}

// basebackup copies the primary and writes standby.signal and primary_conninfo (-R).
func (p *Pair) basebackup(dir, data string, cred *syscall.Credential) error {
	return run(dir, cred, filepath.Join(p.bin, "pg_basebackup"), "-h", "127.0.0.1",
		"-p", strconv.Itoa(p.Primary.port), "-U", "postgres", "-D", data, "-R", "-X", "stream", "--no-sync")
}

func run(dir string, cred *syscall.Credential, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", filepath.Base(name), err, testserver.Tail(string(out)))
	}
	return nil
}

// waitReady waits until the node accepts connections (a standby accepts reads) and
// names itself by its cluster_name: another server could have taken its port first.
// A try ends when the node exits: what holds its port may never answer.
func (n *Node) waitReady(ctx context.Context, log string) error {
	return poll(ctx, func(ctx context.Context) (bool, error) {
		select {
		case <-n.inst.Exited():
			return false, fmt.Errorf("postgres exited during startup: %s", testserver.ReadTail(log))
		default:
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		go func() {
			select {
			case <-n.inst.Exited():
				cancel()
			case <-ctx.Done():
			}
		}()
		conn, err := pgx.Connect(ctx, n.dsn)
		if err != nil {
			return false, nil
		}
		defer conn.Close(ctx)
		var name string // another server could have taken the port first
		if err := conn.QueryRow(ctx, "SHOW cluster_name").Scan(&name); err != nil || name != filepath.Base(n.inst.Dir) {
			return false, nil
		}
		return true, nil
	})
}

// waitStreaming waits until the primary reports the standby streaming in syncState.
func (p *Pair) waitStreaming(ctx context.Context, syncState string) error {
	return p.Primary.poll(ctx, func(ctx context.Context, c *pgx.Conn) (bool, error) {
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2`, StandbyName, syncState).Scan(&n)
		return n == 1, err
	})
}

// WaitReplayed waits until the standby has replayed everything the primary has written.
func (p *Pair) WaitReplayed(t testing.TB) {
	t.Helper()
	ctx := t.Context()
	var lsn string
	if err := p.Primary.query(ctx, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		t.Fatalf("pgrepltest: primary's WAL position: %v", err)
	}
	err := p.Standby.poll(ctx, func(ctx context.Context, c *pgx.Conn) (bool, error) {
		var done bool
		err := c.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", lsn).Scan(&done)
		return done, err
	})
	if err != nil {
		t.Fatalf("pgrepltest: standby replay: %v", err)
	}
}

// KillPrimary crashes the primary (SIGKILL to all its processes); replication held
// is dropped, not delivered.
func (p *Pair) KillPrimary(t testing.TB) {
	t.Helper()
	_ = p.proxy.Close()
	if err := p.Primary.inst.SignalAll(syscall.SIGKILL); err != nil {
		t.Fatalf("pgrepltest: kill primary: %v", err)
	}
	<-p.Primary.inst.Exited()
}

// Promote promotes the standby and waits until it takes writes.
// It clears synchronous_standby_names there: with no standby of its own a promoted
// node that inherited it would hang every COMMIT.
func (p *Pair) Promote(t testing.TB) {
	t.Helper()
	ctx := t.Context()
	var ok bool
	if err := p.Standby.query(ctx, "SELECT pg_promote(true, 60)", &ok); err != nil || !ok {
		t.Fatalf("pgrepltest: promote: %v (promoted: %v)", err, ok)
	}
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()"} {
		if err := p.Standby.exec(ctx, q); err != nil {
			t.Fatalf("pgrepltest: %s: %v", q, err)
		}
	}
}

// CancelSyncWaits cancels (pg_cancel_backend) every backend of the primary whose
// COMMIT waits for the standby, once at least one does, and returns how many.
// PostgreSQL then commits locally with a WARNING instead of an error.
func (p *Pair) CancelSyncWaits(t testing.TB) int {
	t.Helper()
	var n int
	err := p.Primary.poll(t.Context(), func(ctx context.Context, c *pgx.Conn) (bool, error) {
		err := c.QueryRow(ctx, `SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
			WHERE wait_event = 'SyncRep'`).Scan(&n)
		return n > 0, err
	})
	if err != nil {
		t.Fatalf("pgrepltest: cancel synchronous waits: %v", err)
	}
	return n
}

func (n *Node) query(ctx context.Context, q string, dest any) error {
	c, err := pgx.Connect(ctx, n.dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, q).Scan(dest)
}

func (n *Node) exec(ctx context.Context, q string) error {
	c, err := pgx.Connect(ctx, n.dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, q)
	return err
}

// poll runs check on one connection to n until it reports done or fails.
func (n *Node) poll(ctx context.Context, check func(context.Context, *pgx.Conn) (bool, error)) error {
	c, err := pgx.Connect(ctx, n.dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return poll(ctx, func(ctx context.Context) (bool, error) { return check(ctx, c) })
}

// poll calls check every 20 ms until it reports done, fails, or two minutes pass.
func poll(ctx context.Context, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		done, err := check(ctx)
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
