package redisfence_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/fence"
)

// names is a go-redis hook recording the names of the commands sent.
type names struct {
	mu   sync.Mutex
	sent []string
}

func (n *names) DialHook(next redis.DialHook) redis.DialHook { return next }
func (n *names) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" { // a new connection's handshake
			n.mu.Lock()
			n.sent = append(n.sent, cmd.Name())
			n.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (n *names) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (n *names) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.sent
	n.sent = nil
	return s
}

// TestStore_restart checks that the mark survives Redis being killed and started
// again from its append-only file (appendfsync always) between two writes: a
// stale write after the restart is refused, a newer one accepted. The restarted
// server has no scripts: the first write after it sends EVALSHA, gets NOSCRIPT and
// sends the script whole (EVAL), once; the next one is an EVALSHA again.
func TestStore_restart(t *testing.T) {
	if os.Getenv(redistest.EnvURL) != "" {
		t.Skip("a server named by " + redistest.EnvURL + " is not restarted")
	}
	rec := &names{}
	storeClient := redis.NewClient(node.Options(t))
	storeClient.AddHook(rec)
	e := envOn(t, node.Client(t), storeClient)
	ctx := t.Context()
	res := e.res("r")
	k := e.key(res, "k")
	for _, crash := range []bool{true, false} {
		tok := e.mark(t, res) + 5
		if err := e.store.Set(ctx, fence.NewGrant(res, tok), k, "before", 0); err != nil {
			t.Fatal(err)
		}
		if err := node.Restart(ctx, crash); err != nil {
			t.Fatal(err)
		}
		rec.take()
		wantStale(t, e.store.Set(ctx, fence.NewGrant(res, tok-1), k, "stale", 0), res, tok-1, tok)
		if got := rec.take(); len(got) != 2 || got[0] != "evalsha" || got[1] != "eval" {
			t.Fatalf("first write after a restart sent %q, want evalsha then eval", got)
		}
		if err := e.store.Set(ctx, fence.NewGrant(res, tok+1), k, "after", 0); err != nil {
			t.Fatal(err)
		}
		if got := rec.take(); len(got) != 1 || got[0] != "evalsha" {
			t.Fatalf("second write after a restart sent %q, want one evalsha", got)
		}
		if v, _ := e.get(t, k); v != "after" || e.mark(t, res) != tok+1 {
			t.Fatalf("crash %v: %q, mark %d; want after, %d", crash, v, e.mark(t, res), tok+1)
		}
	}
}
