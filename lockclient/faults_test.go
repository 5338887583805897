package lockclient_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// overloadedClient is an etcd client whose next n requests to method are
// answered as an overloaded etcd answers them ("etcdserver: too many
// requests", sent before anything is proposed), without reaching etcd.
func overloadedClient(t *testing.T, srv *locktest.Cluster, method string, n *atomic.Int64) *clientv3.Client {
	t.Helper()
	refuse := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m == method && n.Add(-1) >= 0 {
			return rpctypes.ErrGRPCRequestTooManyRequests
		}
		return invoke(ctx, m, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(refuse)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return locktest.Namespace(cli, srv.Prefix())
}

// retries counts the Retried reports an Observer is told.
type retries struct {
	mu  sync.Mutex
	ops map[string]int
}

func (r *retries) Acquired(string, time.Duration, error)                {}
func (r *retries) Ended(string, fence.Token, time.Duration, error)      {}
func (r *retries) KeepAlive(time.Duration, error)                       {}
func (r *retries) Session(int, error)                                   {}
func (r *retries) TermBegun(string, fence.Token)                        {}
func (r *retries) TermEnded(string, fence.Token, time.Duration, string) {}
func (r *retries) Retried(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[op]++
}

func (r *retries) count(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[op]
}

// TestClient_Acquire_overloaded: requests an overloaded etcd refuses before
// proposing them are sent again after a pause, within the caller's ctx, and
// counted; the lock is granted with one write.
func TestClient_Acquire_overloaded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, op string
		acquire          func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error)
	}{
		{"acquire", "/etcdserverpb.KV/Txn", "acquire", func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error) {
			return c.Acquire(ctx, "job")
		}},
		{"try set", "/etcdserverpb.KV/Txn", "acquire", func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error) {
			return c.TryAcquireSet(ctx, []string{"job", "other"})
		}},
		{"grant", "/etcdserverpb.Lease/LeaseGrant", "grant", func(ctx context.Context, c *lockclient.Client) (*lockclient.Lock, error) {
			return c.TryAcquire(ctx, "job")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := shared.Cluster(t)
			var refusals atomic.Int64
			refusals.Store(3)
			obs := &retries{ops: map[string]int{}}
			c := newClient(t, overloadedClient(t, srv, tt.method, &refusals), lockclient.WithObserver(obs))
			before := revision(t, srv.Client(t))
			l, err := tt.acquire(t.Context(), c)
			if err != nil {
				t.Fatalf("acquire through an overloaded etcd: %v", err)
			}
			if got := obs.count(tt.op); got != 3 {
				t.Fatalf("Observer told of %d %s retries, want 3", got, tt.op)
			}
			if l.Token() <= fence.Token(before) {
				t.Fatalf("token %d not above the revision %d before", l.Token(), before)
			}
		})
	}
	t.Run("ctx ends", func(t *testing.T) {
		srv := shared.Cluster(t)
		var refusals atomic.Int64
		refusals.Store(1 << 40)
		c := newClient(t, overloadedClient(t, srv, "/etcdserverpb.KV/Txn", &refusals))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := c.Acquire(ctx, "job"); err == nil || ctx.Err() == nil {
			t.Fatalf("Acquire against an etcd overloaded for good = %v, want ctx's end", err)
		}
	})
}

// TestClient_Acquire_ownOrphan: an acquire Txn that landed but whose answer was
// lost (the outcome unknown) while the session was lost too leaves a key of
// this Client under the old lease. The retry under a new session recognises the
// key as its own and takes the lock at once, instead of waiting the old lease out.
func TestClient_Acquire_ownOrphan(t *testing.T) {
	t.Parallel()
	srv := shared.Cluster(t)
	var c *lockclient.Client
	var armed atomic.Bool
	var orphanLease atomic.Int64
	lose := func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m != "/etcdserverpb.KV/Txn" || !armed.CompareAndSwap(true, false) {
			return invoke(ctx, m, req, reply, cc, opts...)
		}
		if err := invoke(ctx, m, req, reply, cc, opts...); err != nil {
			return err
		}
		orphanLease.Store(int64(lockclient.SessionLease(c)))
		lockclient.LoseSession(c)
		return status.Error(codes.Unavailable, "answer lost in transit")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(lose)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c = newClient(t, locktest.Namespace(cli, srv.Prefix()), lockclient.WithTTL(30*time.Second))
	warm := mustAcquire(t, c, "warm") // the session exists before the armed Txn
	if err := warm.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	l := mustAcquire(t, c, "job")
	if orphanLease.Load() == 0 {
		t.Fatal("the armed Txn was never sent")
	}
	// The old lease still lives in etcd: its key was deleted, not waited out.
	resp, err := srv.Client(t).TimeToLive(t.Context(), clientv3.LeaseID(orphanLease.Load()))
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL <= 0 {
		t.Fatalf("Acquire returned only after its own orphan's lease expired (TTL %d)", resp.TTL)
	}
	if info, err := c.Holder(t.Context(), "job"); err != nil || info.Token != l.Token() {
		t.Fatalf("Holder = %+v, %v; want token %d", info, err, l.Token())
	}
}
