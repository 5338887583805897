package s3fence_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/adapters/s3fence"
	"github.com/fencegate/fencegate/adapters/s3fence/s3test"
	"github.com/fencegate/fencegate/fence"
)

// gateway is one real versitygw server for the package's tests, started by the
// first Bucket; each test gets a bucket of its own.
var gateway s3test.Server

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	if err := gateway.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// counting wraps a real client and counts the requests made through it. before,
// when set, runs before each request with its name, so a test can change the
// world between two requests of one write (a competing writer, a lost lock).
type counting struct {
	s3fence.API
	heads, gets, puts atomic.Int64
	before            func(op string)
}

func (c *counting) hook(op string) {
	if c.before != nil {
		c.before(op)
	}
}

func (c *counting) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	c.heads.Add(1)
	c.hook("head")
	return c.API.HeadObject(ctx, in, o...)
}

func (c *counting) GetObject(ctx context.Context, in *s3.GetObjectInput, o ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	c.gets.Add(1)
	c.hook("get")
	return c.API.GetObject(ctx, in, o...)
}

func (c *counting) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	c.puts.Add(1)
	c.hook("put")
	return c.API.PutObject(ctx, in, o...)
}

func (c *counting) requests() int64 { return c.heads.Load() + c.gets.Load() + c.puts.Load() }

// env is one test's bucket on the shared server, a raw client and a Store over a
// counting wrapper of it.
type env struct {
	raw    *s3.Client
	api    *counting
	store  *s3fence.Store
	bucket string
}

func newEnv(t *testing.T, opts ...s3fence.Option) *env {
	t.Helper()
	raw, bucket := gateway.Bucket(t)
	api := &counting{API: raw}
	store, err := s3fence.New(api, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &env{raw: raw, api: api, store: store, bucket: bucket}
}

func (e *env) input(key, body string) *s3.PutObjectInput {
	return &s3.PutObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key), Body: strings.NewReader(body)}
}

// put writes body to key for token, failing t on an error.
func (e *env) put(t *testing.T, key string, token fence.Token, body string) s3fence.Version {
	t.Helper()
	v, err := e.store.Put(t.Context(), fence.NewGrant("res", token), e.input(key, body))
	if err != nil {
		t.Fatalf("Put(%s, token %d) = %v", key, token, err)
	}
	return v
}

// raw reads key with a plain GetObject: its body and fence-token metadata, or
// found false.
func (e *env) rawGet(t *testing.T, key string) (body, token string, found bool) {
	t.Helper()
	out, err := e.raw.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key)})
	if err != nil {
		if strings.Contains(err.Error(), "NoSuchKey") {
			return "", "", false
		}
		t.Fatalf("GetObject(%s): %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), out.Metadata[s3fence.TokenKey], true
}

// watched is a grant whose lock can be lost on cue.
type watched struct {
	fence.Grant
	once sync.Once
	done chan struct{}
}

func newWatched(resource string, token fence.Token) *watched {
	return &watched{Grant: fence.NewGrant(resource, token), done: make(chan struct{})}
}

func (w *watched) Done() <-chan struct{} { return w.done }
func (w *watched) lose()                 { w.once.Do(func() { close(w.done) }) }

// set is a grant over several resources.
type set struct{ fence.Grant }

func (set) Resources() []string { return []string{"a", "b"} }
