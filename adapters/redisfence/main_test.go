package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/fence"
)

// node and cluster are the package's real Redis servers, started on first use;
// tests keep apart by the resources and keys they name.
var (
	node    redistest.Node
	cluster redistest.Cluster
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	code := m.Run()
	for _, c := range []interface{ Close() error }{&node, &cluster} {
		if err := c.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// counter is a go-redis hook counting the commands a client sends, so that a test
// can tell that a refusal made no I/O: n counts every command but COMMAND (the
// Store reading the server's command table, or asking it for keys), which table
// counts, and a new connection's HELLO and CLIENT SETINFO, which neither does.
// pipelines counts the pipelines sent.
type counter struct{ n, table, pipelines atomic.Int64 }

func (c *counter) add(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "command":
			c.table.Add(1)
		case "hello", "client":
		default:
			c.n.Add(1)
		}
	}
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.pipelines.Add(1)
		c.add(cmds...)
		return next(ctx, cmds)
	}
}

// env is one test's view of a server: a raw client, the count of commands sent
// through the Store's client, the Store, and a prefix for its resources.
type env struct {
	raw   redis.UniversalClient
	sent  *counter
	store *redisfence.Store
	ns    string
}

var seq atomic.Int64

func newEnv(t *testing.T, opts ...redisfence.Option) *env {
	t.Helper()
	return envOn(t, node.Client(t), redis.NewClient(node.Options(t)), opts...)
}

func newClusterEnv(t *testing.T, opts ...redisfence.Option) *env {
	t.Helper()
	return envOn(t, cluster.Client(t), redis.NewClusterClient(cluster.Options(t)), opts...)
}

func envOn(t *testing.T, raw, storeClient redis.UniversalClient, opts ...redisfence.Option) *env {
	t.Helper()
	t.Cleanup(func() { storeClient.Close() })
	c := &counter{}
	storeClient.AddHook(c)
	store, err := redisfence.New(storeClient, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ns := fmt.Sprintf("%s-%d", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), seq.Add(1))
	return &env{raw: raw, sent: c, store: store, ns: ns}
}

// res names a resource of this test, and key a data key of it ({resource}:name).
func (e *env) res(name string) string      { return e.ns + "-" + name }
func (e *env) key(res, name string) string { return "{" + res + "}:" + name }

// mark returns the resource's stored token read with plain commands, 0 for none.
func (e *env) mark(t *testing.T, res string) fence.Token {
	t.Helper()
	n, err := e.raw.HGet(t.Context(), redisfence.MarkKey(res), "token").Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("HGET mark of %q: %v", res, err)
	}
	return fence.Token(n)
}

// get reads key with a plain GET: its value, or found false.
func (e *env) get(t *testing.T, key string) (string, bool) {
	t.Helper()
	v, err := e.raw.Get(t.Context(), key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v, true
}

// wantStale fails t unless err is a *fence.StaleError naming res, presented and
// seen.
func wantStale(t *testing.T, err error, res string, presented, seen fence.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("err = %v, want a *fence.StaleError", err)
	}
	if se.Resource != res || se.Presented != presented || se.Seen != seen {
		t.Fatalf("StaleError{%q, %d, %d}, want {%q, %d, %d}", se.Resource, se.Presented, se.Seen, res, presented, seen)
	}
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

// setGrant is a grant over several resources under one token.
type setGrant struct {
	res []string
	tok fence.Token
}

func (s setGrant) Resource() string    { return s.res[0] }
func (s setGrant) Token() fence.Token  { return s.tok }
func (s setGrant) Resources() []string { return s.res }
