// Package s3test gives tests and examples a real S3 server: versitygw (an
// Apache-2.0 S3 gateway over a local directory, with real SigV4 authentication and
// conditional writes), built once from the Go module proxy and started as a
// subprocess on a loopback port with its data in a temporary directory.
//
//	var gateway = s3test.New()
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		gateway.Close()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { client, bucket := gateway.Bucket(t) ... }
//
// Where no server can be had (no go command to build it, no network to fetch it),
// Bucket skips the test with the reason; when the environment variable CI is set it
// fails the test instead, so CI never skips. EnvBinary names a prebuilt binary.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testserver"
)

// ClientTimeout bounds every request of the clients this package makes, so that a
// stuck server fails a test instead of hanging it.
const ClientTimeout = 30 * time.Second

// Server is one running versitygw process.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:PORT.
	Endpoint string
	// AccessKey and SecretKey are the root credentials the server accepts.
	AccessKey, SecretKey string

	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start builds versitygw if needed (see Binary) and starts it with a fresh data
// directory on a free loopback port. It returns once the server accepts
// connections, or an error saying why it did not. Close stops it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := Binary(ctx)
	if err != nil {
		return nil, err
	}
	// A free port can be taken by another process before the server binds it.
	for range 3 {
		var s *Server
		if s, err = start(ctx, bin); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func start(ctx context.Context, bin string) (*Server, error) {
	port, err := testserver.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "s3test-")
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &Server{Endpoint: "http://" + addr, AccessKey: "fencegate", SecretKey: "fencegate-secret", dir: dir}
	s.cmd = exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet", "posix", dir)
	log, err := os.Create(dir + ".log")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// The kernel kills the server if the process that started it dies uncleanly.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("s3test: start versitygw: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(ctx, addr); err != nil {
		s.Close()
		return nil, fmt.Errorf("s3test: versitygw: %w\n%s", err, testserver.ReadTail(dir+".log"))
	}
	return s, nil
}

func (s *Server) waitReady(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			return errors.New("exited during startup")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return errors.New("not accepting connections after 30s")
}

// Close stops the server and removes its data. It is safe to call more than once.
func (s *Server) Close() error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		err = errors.New("s3test: versitygw did not stop within 10s; killed")
	}
	s.cmd = nil
	os.RemoveAll(s.dir)
	os.Remove(s.dir + ".log")
	return err
}

// Client returns an S3 client for endpoint (a server's Endpoint or a proxy in
// front of it) with the server's credentials, path-style addressing, every request
// bounded by ClientTimeout, and up to 64 idle connections kept for concurrent use.
func (s *Server) Client(endpoint string) *s3.Client {
	hc := awshttp.NewBuildableClient().WithTimeout(ClientTimeout).WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 64
	})
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		UsePathStyle: true,
		HTTPClient:   hc,
	})
}

// Shared is a server shared by the tests of one package, started on first use. It
// is safe for concurrent use.
type Shared struct {
	mu   sync.Mutex
	srv  *Server
	err  error
	seq  int
	done bool
}

// New returns a Shared server that starts on the first call to Server or Bucket.
func New() *Shared { return &Shared{} }

// Server returns the running server, starting it on the first call. It skips t when
// no server can be had, or fails it when the environment variable CI is set.
func (sh *Shared) Server(t testing.TB) *Server {
	t.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.done {
		sh.done = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		sh.srv, sh.err = Start(ctx)
	}
	if sh.err != nil {
		testserver.Unavailable(t, "s3test: no versitygw server", sh.err, "needs the go command and the Go module proxy to build versitygw "+Version+", or set "+EnvBinary)
	}
	return sh.srv
}

// Bucket creates a fresh, empty bucket for t and returns it with a client of the
// shared server. The bucket is left behind; Close removes all data.
func (sh *Shared) Bucket(t testing.TB) (*s3.Client, string) {
	t.Helper()
	srv := sh.Server(t)
	sh.mu.Lock()
	sh.seq++
	name := fmt.Sprintf("fgtest-%d-%d", os.Getpid(), sh.seq)
	sh.mu.Unlock()
	c := srv.Client(srv.Endpoint)
	if _, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return c, name
}

// Close stops the server, if one was started.
func (sh *Shared) Close() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.srv == nil {
		return nil
	}
	return sh.srv.Close()
}
