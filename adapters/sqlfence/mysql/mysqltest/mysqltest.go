// Package mysqltest gives tests a real MariaDB (or MySQL): the server named by the
// environment variable FENCEGATE_MYSQL_DSN, or a throwaway MariaDB started from
// Debian's mariadb-server package in a temporary directory on a loopback port. One
// server serves a whole test package; each test gets a fresh database on it.
//
//	var mariadb = mysqltest.New()
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		mariadb.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { dsn := mariadb.DSN(t) ... }
//
// Where no server can be had, DSN skips the test with the reason; when the
// environment variable CI is set it fails the test instead, so CI never skips.
package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencegate/fencegate/testserver"
)

// EnvDSN names the environment variable holding the DSN of a server to use instead of
// starting one. Its user needs CREATE and DROP DATABASE.
const EnvDSN = "FENCEGATE_MYSQL_DSN"

// Server is a MySQL-protocol server shared by the tests of one package. It starts on
// first use and is safe for concurrent use.
type Server struct {
	mu    sync.Mutex
	tried bool
	err   error         // why no server can be had
	cfg   *mysql.Config // admin account, no database
	admin *sql.DB
	inst  *testserver.Instance // the server this Server started; nil: none
	seq   int
}

// New returns a Server that starts (or connects) on the first call to DSN.
func New() *Server { return &Server{} }

// DSN creates a fresh, empty database for t, drops it when t ends, and returns a
// go-sql-driver/mysql DSN for it. The DSN sets no optional parameters (in particular
// neither clientFoundRows nor interpolateParams), so tests decide. It skips t when no
// server can be had, or fails it when the environment variable CI is set.
func (s *Server) DSN(t testing.TB) string {
	t.Helper()
	cfg, admin, name, err := s.database()
	if err != nil {
		testserver.Unavailable(t, "mysqltest: no MariaDB/MySQL server", err, "install mariadb-server or set "+EnvDSN)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("mysqltest: drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

func (s *Server) database() (*mysql.Config, *sql.DB, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried {
		s.tried = true
		s.err = s.start()
	}
	if s.err != nil {
		return nil, nil, "", s.err
	}
	s.seq++
	name := testserver.DBName(s.seq)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		return nil, nil, "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.cfg.Clone(), s.admin, name, nil
}

func (s *Server) start() error {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return fmt.Errorf("%s: %w", EnvDSN, err)
		}
		cfg.DBName = ""
		return s.connect(cfg)
	}
	return startOnFreePorts(1, func(ports []int) error {
		cfg, err := s.launch(ports[0])
		if err == nil {
			err = s.connect(cfg)
		}
		if err != nil {
			s.stop()
		}
		return err
	})
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before mariadbd binds it.
var startOnFreePorts = testserver.StartOnFreePorts

func (s *Server) connect(cfg *mysql.Config) error {
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	s.cfg, s.admin = cfg, db
	return nil
}

// launch starts a throwaway mariadbd on port and returns the config of a TCP account
// on it.
func (s *Server) launch(port int) (*mysql.Config, error) {
	bins := map[string]string{}
	for _, b := range []string{"mariadb-install-db", "mariadbd", "mariadb-admin", "mariadb"} {
		p, err := lookPath(b)
		if err != nil {
			return nil, fmt.Errorf("%s not found (apt-get install mariadb-server): %w", b, err)
		}
		bins[b] = p
	}
	var err error
	if s.inst, err = testserver.NewInstance("mariadbd", "fgmy", "mysql"); err != nil {
		return nil, err
	}
	dir := s.inst.Dir
	installArgs := []string{"--no-defaults", "--datadir=" + filepath.Join(dir, "data"),
		"--auth-root-authentication-method=socket", "--skip-test-db"}
	if s.inst.Cred != nil {
		installArgs = append(installArgs, "--user=mysql")
	}
	if out, err := exec.Command(bins["mariadb-install-db"], installArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %w\n%s", err, testserver.Tail(string(out)))
	}
	sock := filepath.Join(dir, "s.sock")
	logFile := filepath.Join(dir, "error.log")
	cmd := exec.Command(bins["mariadbd"], "--no-defaults",
		"--datadir="+filepath.Join(dir, "data"), "--socket="+sock, "--port="+strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--pid-file="+filepath.Join(dir, "mariadbd.pid"),
		"--log-error="+logFile, "--skip-name-resolve",
		// A throwaway server needs no fsync per commit; it also makes benchmarks
		// measure the statements rather than the disk.
		"--innodb-flush-log-at-trx-commit=2", "--max-connections=500")
	// Run as mysql directly (not --user=mysql) so the kernel still kills the server
	// if the test binary dies without cleaning up: a setuid would clear Pdeathsig.
	if err := s.inst.Start(cmd); err != nil {
		return nil, err
	}

	rootArgs := []string{"--no-defaults", "--socket=" + sock, "--user=root"}
	if err := s.waitReady(bins["mariadb-admin"], rootArgs, logFile); err != nil {
		return nil, err
	}
	// root logs in over the socket only; the Go driver gets a TCP account.
	const setup = "CREATE USER 'fencegate'@'127.0.0.1' IDENTIFIED BY 'fencegate'; " +
		"GRANT ALL PRIVILEGES ON *.* TO 'fencegate'@'127.0.0.1' WITH GRANT OPTION;"
	if out, err := exec.Command(bins["mariadb"], append(rootArgs, "-e", setup)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("create test account: %w: %s", err, out)
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = "fencegate", "fencegate"
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return cfg, nil
}

// waitReady pings the starting server over its socket until it answers, for up to
// two minutes, and fails early when it exits.
func (s *Server) waitReady(admin string, rootArgs []string, logFile string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := exec.Command(admin, append(rootArgs, "ping")...).Run()
		if err == nil {
			return nil
		}
		select {
		case <-s.inst.Exited():
			return fmt.Errorf("mariadbd exited during startup: %s", testserver.ReadTail(logFile))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd not answering after 2m: %s", testserver.ReadTail(logFile))
		}
	}
}

// Close stops the server if this Server started it and removes its directory.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	return s.stop()
}

func (s *Server) stop() error {
	var err error
	if s.inst != nil {
		if err = s.inst.Stop(syscall.SIGTERM); err != nil {
			err = fmt.Errorf("mysqltest: %w", err)
		}
		s.inst = nil
	}
	return err
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
