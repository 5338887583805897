// Package s3test gives tests and examples a real S3 server: versitygw v1.8.0 (an
// Apache-2.0 S3 gateway over a local directory, with real SigV4 authentication and
// conditional writes), built once from the Go module proxy and started as a
// subprocess on a loopback port with its data in a temporary directory. The
// environment variable FENCEGATE_VERSITYGW may name a prebuilt versitygw binary to
// run instead.
//
// A package's tests share one Server, whose zero value starts on first use:
//
//	var gateway s3test.Server
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
// fails the test instead, so CI never skips. A program starts one with Start. Every
// request of the clients this package makes gives up after 30 seconds, so that a
// stuck server fails a test instead of hanging it.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

	"github.com/fencegate/fencegate/testserver"
)

// clientTimeout bounds every request of the clients this package makes.
const clientTimeout = 30 * time.Second

// Server is an S3 server: a versitygw process this package started (by Start, or
// by the first Bucket of a zero Server), or an existing server a Server literal
// names by its Endpoint and keys. Its fields are set once Start or the first Bucket
// has returned. It is safe for concurrent use; do not copy it.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:PORT for versitygw.
	Endpoint string
	// AccessKey and SecretKey are the credentials the server accepts.
	AccessKey, SecretKey string

	mu    sync.Mutex
	tried bool  // a versitygw was started, or tried
	err   error // why it could not be
	seq   int   // buckets made by Bucket
	proc  *process
}

// process is a running versitygw.
type process struct {
	dir    string
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// Start builds versitygw if needed and starts it with a fresh data directory on a
// free loopback port. It returns once the server accepts connections, or an error
// saying why it did not. Close stops it.
func Start(ctx context.Context) (*Server, error) {
	s := &Server{tried: true}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start starts versitygw for s, whose fields it sets.
func (s *Server) start(ctx context.Context) error {
	bin, err := binary(ctx)
	if err != nil {
		return err
	}
	// A secret of its own: a server that answers it is this one, not another
	// versitygw that took the port first.
	secret := make([]byte, 8)
	_, _ = rand.Read(secret)
	s.AccessKey, s.SecretKey = "fencegate", "fencegate-"+hex.EncodeToString(secret)
	return startOnFreePorts(1, func(ports []int) error {
		p, endpoint, err := s.run(ctx, bin, ports[0])
		if err == nil {
			s.proc, s.Endpoint = p, endpoint
		}
		return err
	})
}

// startOnFreePorts is testserver.StartOnFreePorts, a variable for this package's
// test that takes the first port before versitygw binds it.
var startOnFreePorts = testserver.StartOnFreePorts

// run starts versitygw on port and returns it with its endpoint once it answers.
func (s *Server) run(ctx context.Context, bin string, port int) (*process, string, error) {
	dir, err := os.MkdirTemp("", "s3test-")
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := &process{dir: dir, cmd: exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey, "--quiet", "posix", dir)}
	log, err := os.Create(dir + ".log")
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	defer log.Close()
	p.cmd.Stdout, p.cmd.Stderr = log, log
	// On Linux the kernel kills the server if the process that started it dies uncleanly.
	p.cmd.SysProcAttr = testserver.ProcAttr(nil)
	exited, err := testserver.StartChild(p.cmd)
	if err != nil {
		os.RemoveAll(dir)
		os.Remove(dir + ".log")
		return nil, "", fmt.Errorf("s3test: start versitygw: %w", err)
	}
	p.exited = exited
	endpoint := "http://" + addr
	own := &Server{Endpoint: endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
	if err := p.waitReady(ctx, own.Client()); err != nil {
		tail := testserver.ReadTail(dir + ".log")
		p.stop()
		return nil, "", fmt.Errorf("s3test: versitygw on %s: %w\n%s", addr, err, tail)
	}
	return p, endpoint, nil
}

// waitReady waits until the server answers c's ListBuckets, signed with its keys.
func (p *process) waitReady(ctx context.Context, c *s3.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		try, cancel := context.WithTimeout(ctx, time.Second)
		_, err = c.ListBuckets(try, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return errors.New("exited during startup")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("not answering after 30s: %w", err)
}

// stop ends the process and removes its data.
func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		err = errors.New("s3test: versitygw did not stop within 10s; killed")
	}
	os.RemoveAll(p.dir)
	os.Remove(p.dir + ".log")
	return err
}

// Close stops the versitygw this package started for s, if any, and removes its
// data; an existing server a literal names is left alone. It is safe to call more
// than once.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	return p.stop()
}

// Client returns an S3 client of the server: its Endpoint and keys, path-style
// addressing, every request bounded by 30 seconds and up to 64 idle connections
// kept for concurrent use. To go through a proxy, copy its options with another
// endpoint: s3.New(c.Options(), func(o *s3.Options) { o.BaseEndpoint = proxy }).
func (s *Server) Client() *s3.Client {
	hc := awshttp.NewBuildableClient().WithTimeout(clientTimeout).WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 64, 64
	})
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		UsePathStyle: true,
		HTTPClient:   hc,
	})
}

// Bucket creates a fresh, empty bucket for t and returns it with a client. A zero
// Server starts versitygw on the first call; when no server can be had, Bucket
// skips t, or fails it when the environment variable CI is set. The bucket is left
// behind; Close removes all data.
func (s *Server) Bucket(t testing.TB) (*s3.Client, string) {
	t.Helper()
	s.mu.Lock()
	if s.Endpoint == "" && !s.tried {
		s.tried = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		s.err = s.start(ctx)
		cancel()
	}
	err := s.err
	s.seq++
	name := fmt.Sprintf("fgtest-%d-%d", os.Getpid(), s.seq)
	s.mu.Unlock()
	if err != nil {
		testserver.Unavailable(t, "s3test: no versitygw server", err, "needs the go command and the Go module proxy to build versitygw "+version+", or set "+envBinary)
	}
	c := s.Client()
	if _, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return c, name
}
