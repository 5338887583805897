// Package pgtest gives tests a real PostgreSQL: the server named by the environment
// variable FENCEGATE_POSTGRES_DSN, or a throwaway PostgreSQL started from Debian's
// postgresql package (/usr/lib/postgresql/*/bin) in a temporary directory on a
// loopback port. One server serves a whole test package; each test gets a fresh
// database on it.
//
//	var postgres = pgtest.New()
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		postgres.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { dsn := postgres.DSN(t) ... }
//
// Where no server can be had, DSN skips the test with the reason; when the
// environment variable CI is set it fails the test instead, so CI never skips.
//
// A server the Server started can be crashed (Crash: every postgres process
// killed) and restarted on its data (Restart), for tests of what a crash of the
// database does to a job. Its databases set synchronous_commit=on (ALTER
// DATABASE, not a DSN parameter, which PgBouncer refuses), so every commit
// acknowledged before Crash is there after Restart.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/testserver"
)

// EnvDSN names the environment variable holding the URL of a server to use instead
// of starting one. Its user needs CREATEDB.
const EnvDSN = "FENCEGATE_POSTGRES_DSN"

// Server is a PostgreSQL server shared by the tests of one package. It starts on first
// use and is safe for concurrent use.
type Server struct {
	mu    sync.Mutex
	tried bool
	err   error    // why no server can be had
	base  *url.URL // admin URL; the path names the database
	admin *pgx.Conn
	inst  *testserver.Instance // the server this Server started; nil: none
	bin   string               // its binaries' directory
	port  int
	down  bool // crashed and not yet restarted
	seq   int
}

// New returns a Server that starts (or connects) on the first call to DSN.
func New() *Server { return &Server{} }

// DSN creates a fresh, empty database for t, drops it when t ends, and returns a
// postgres:// URL for it. It skips t when no server can be had, or fails it when the
// environment variable CI is set.
func (s *Server) DSN(t testing.TB) string {
	t.Helper()
	u, name, err := s.database()
	if err != nil {
		testserver.Unavailable(t, "pgtest: no PostgreSQL server", err, "apt-get install postgresql, or set "+EnvDSN)
	}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.admin == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE: a test that leaked a connection must not keep its database alive.
		if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return u
}

func (s *Server) database() (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tried {
		s.tried = true
		s.err = s.start()
	}
	if s.err != nil {
		return "", "", s.err
	}
	if s.down {
		return "", "", errors.New("the server has crashed (Crash) and was not restarted (Restart)")
	}
	s.seq++
	name := testserver.DBName(s.seq)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("create database %s: %w", name, err)
	}
	if s.inst != nil { // an acknowledged commit survives Crash
		if _, err := s.admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET synchronous_commit = on"); err != nil {
			return "", "", fmt.Errorf("set synchronous_commit on %s: %w", name, err)
		}
	}
	u := *s.base
	u.Path = "/" + name
	return u.String(), name, nil
}

func (s *Server) start() error {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		u, err := url.Parse(dsn)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return fmt.Errorf("%s must be a postgres:// URL", EnvDSN)
		}
		return s.connect(u, 30*time.Second)
	}
	return startOnFreePorts(1, func(ports []int) error {
		u, err := s.launch(ports[0])
		if err == nil {
			err = s.connect(u, 2*time.Minute)
		}
		if err != nil {
			s.stop()
		}
		return err
	})
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before postgres binds it.
var startOnFreePorts = testserver.StartOnFreePorts

// connect opens the admin connection, retrying while a server just launched starts.
// A try ends when that server exits: the process that holds its port may never answer.
func (s *Server) connect(u *url.URL, wait time.Duration) error {
	var exited <-chan struct{}
	if s.inst != nil {
		exited = s.inst.Exited()
	}
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		go func() {
			select {
			case <-exited:
				cancel()
			case <-ctx.Done():
			}
		}()
		conn, err := pgx.Connect(ctx, u.String())
		if err == nil && s.inst != nil {
			err = isCluster(ctx, conn, filepath.Base(s.inst.Dir))
		}
		cancel()
		if err == nil {
			s.base, s.admin = u, conn
			return nil
		}
		if s.inst != nil {
			select {
			case <-s.inst.Exited():
				return fmt.Errorf("postgres exited during startup: %s", testserver.ReadTail(filepath.Join(s.inst.Dir, "postgres.log")))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connect to %s: %w", u.Host, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isCluster checks that conn reaches the server started with cluster_name name, not
// another that took its port first, and closes conn if not.
func isCluster(ctx context.Context, conn *pgx.Conn, name string) error {
	var got string
	err := conn.QueryRow(ctx, "SHOW cluster_name").Scan(&got)
	if err == nil && got != name {
		err = fmt.Errorf("another PostgreSQL (cluster_name %q) answers on its port", got)
	}
	if err != nil {
		conn.Close(ctx)
	}
	return err
}

// launch initialises a cluster in a temporary directory and starts postgres on it,
// on port.
func (s *Server) launch(port int) (*url.URL, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if s.inst, err = testserver.NewInstance("postgres", "fgpg", "postgres"); err != nil {
		return nil, err
	}
	s.bin = bin
	dir, cred := s.inst.Dir, s.inst.Cred
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, testserver.Tail(string(out)))
	}
	s.port = port
	if err := s.startPostgres(); err != nil {
		return nil, err
	}
	return &url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}, nil
}

// startPostgres starts postgres on the cluster in s.inst.Dir, on s.port.
func (s *Server) startPostgres() error {
	dir, cred := s.inst.Dir, s.inst.Cred
	logFile, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	if cred != nil {
		_ = logFile.Chown(int(cred.Uid), int(cred.Gid))
	}
	// postgres runs as a child of the test binary rather than daemonised by pg_ctl, so
	// it dies with the test binary.
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(s.port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "cluster_name="+filepath.Base(dir), // to tell it from a server that took its port
		// A throwaway server needs no durability against the machine's crash; benchmarks
		// then measure the statements rather than the disk (the same for every variant
		// in a run). Each database sets synchronous_commit=on, which survives Crash.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	return s.inst.Start(cmd)
}

// Close stops the server if this Server started it and removes its directory.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.admin.Close(ctx)
		cancel()
		s.admin = nil
	}
	return s.stop()
}

func (s *Server) stop() error {
	var err error
	if s.inst != nil {
		// SIGINT is postgres's fast shutdown (pg_ctl -m fast).
		if err = s.inst.Stop(syscall.SIGINT); err != nil {
			err = fmt.Errorf("pgtest: %w", err)
		}
		s.inst = nil
	}
	return err
}

// BinDir finds the newest /usr/lib/postgresql/<version>/bin holding initdb and
// postgres, or a directory on PATH holding both.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres not found in /usr/lib/postgresql/*/bin or on PATH")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
