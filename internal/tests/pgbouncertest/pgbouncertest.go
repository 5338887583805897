// Package pgbouncertest puts a throwaway PgBouncer in transaction pooling mode (Debian's
// pgbouncer package) in front of a pgtest server, as most production deployments of
// PostgreSQL have one: each transaction may run on another server connection, so a
// named prepared statement or an unnamed one described in an earlier round trip is
// not where the next transaction looks for it.
//
//	var (
//		postgres = pgtest.New()
//		bouncer  = pgbouncertest.New(postgres, 8)
//	)
//	func TestX(t *testing.T) { dsn := bouncer.DSN(t) ... } // a fresh database, through PgBouncer
//
// One PgBouncer serves a whole test package; Close stops it (before the server's
// Close). Where no PgBouncer can be had, DSN skips the test, or fails it when the
// environment variable CI is set.
package pgbouncertest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/testserver"
)

// EnvBinary names the environment variable holding the pgbouncer binary to run instead
// of /usr/sbin/pgbouncer or the one on PATH.
const EnvBinary = "FENCEGATE_PGBOUNCER"

// Server is a PgBouncer in front of a pgtest.Server, shared by the tests of one
// package. It starts on first use and is safe for concurrent use.
type Server struct {
	pg       *pgtest.Server
	poolSize int

	mu    sync.Mutex
	tried bool
	err   error
	port  int
	inst  *testserver.Instance
}

// New returns a Server that starts PgBouncer on the first call to DSN, with poolSize
// server connections per database and user (default_pool_size).
func New(pg *pgtest.Server, poolSize int) *Server {
	return &Server{pg: pg, poolSize: poolSize}
}

// DSN creates a fresh database on the PostgreSQL server (pgtest.Server.DSN) and returns
// a postgres:// URL reaching it through PgBouncer in transaction pooling mode.
func (s *Server) DSN(t testing.TB) string {
	t.Helper()
	via, _ := s.DSNs(t)
	return via
}

// DSNs is DSN that also returns the URL of the same database on the server itself,
// for what needs a session of its own (migrations take a session-level advisory lock).
func (s *Server) DSNs(t testing.TB) (viaBouncer, direct string) {
	t.Helper()
	direct = s.pg.DSN(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	port, err := s.start(u)
	if err != nil {
		testserver.Unavailable(t, "pgbouncertest: no PgBouncer", err, "apt-get install pgbouncer, or set "+EnvBinary)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return u.String(), direct
}

func (s *Server) start(target *url.URL) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried {
		s.tried = true
		s.err = startOnFreePorts(1, func(ports []int) error { return s.launch(target, ports[0]) })
	}
	return s.port, s.err
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before pgbouncer binds it.
var startOnFreePorts = testserver.StartOnFreePorts

func binary() (string, error) {
	if b := os.Getenv(EnvBinary); b != "" {
		return b, nil
	}
	if fi, err := os.Stat("/usr/sbin/pgbouncer"); err == nil && !fi.IsDir() {
		return "/usr/sbin/pgbouncer", nil
	}
	return exec.LookPath("pgbouncer")
}

// launch writes a configuration forwarding every database name to the same name on
// target's server, and starts pgbouncer on port.
func (s *Server) launch(target *url.URL, port int) error {
	bin, err := binary()
	if err != nil {
		return err
	}
	inst, err := testserver.NewInstance("pgbouncer", "fgpb", "postgres")
	if err != nil {
		return err
	}
	user := target.User.Username()
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits
server_reset_query =
logfile = %s
pidfile = %s
`, target.Hostname(), target.Port(), port, filepath.Join(inst.Dir, "users.txt"), s.poolSize,
		filepath.Join(inst.Dir, "pgbouncer.log"), filepath.Join(inst.Dir, "pgbouncer.pid"))
	files := map[string]string{"pgbouncer.ini": conf, "users.txt": fmt.Sprintf("%q \"\"\n", user)}
	for name, body := range files {
		p := filepath.Join(inst.Dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			inst.Stop(syscall.SIGINT)
			return err
		}
		if inst.Cred != nil {
			_ = os.Chown(p, int(inst.Cred.Uid), int(inst.Cred.Gid))
		}
	}
	cmd := exec.Command(bin, filepath.Join(inst.Dir, "pgbouncer.ini"))
	cmd.Dir = inst.Dir
	if err := inst.Start(cmd); err != nil {
		inst.Stop(syscall.SIGINT)
		return err
	}
	s.inst, s.port = inst, port
	return s.waitListening()
}

// waitListening waits until pgbouncer logs that it listens on its port: a connection
// alone could reach another process that took the port first.
func (s *Server) waitListening() error {
	deadline := time.Now().Add(time.Minute)
	log := filepath.Join(s.inst.Dir, "pgbouncer.log")
	want := "listening on " + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	for {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), want) {
			return nil
		}
		select {
		case <-s.inst.Exited():
			tail := testserver.ReadTail(log)
			s.inst.Stop(syscall.SIGINT)
			s.inst = nil
			return fmt.Errorf("pgbouncer exited during startup: %s", tail)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgbouncer not listening on port %d after 1m: %s", s.port, testserver.ReadTail(log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops PgBouncer if it was started. Call it before the pgtest.Server's Close.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return nil
	}
	// SIGINT is pgbouncer's safe shutdown; SIGTERM its immediate one.
	err := s.inst.Stop(syscall.SIGTERM)
	s.inst = nil
	if err != nil {
		return fmt.Errorf("pgbouncertest: %w", err)
	}
	return nil
}
