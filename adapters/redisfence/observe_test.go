package redisfence_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient/lockmetrics"
)

type recorder struct {
	mu     sync.Mutex
	writes []string
}

func (r *recorder) FencedWrite(adapter, op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := "accepted"
	if err != nil {
		res = err.Error()
	}
	r.writes = append(r.writes, adapter+" "+op+" "+res)
}

// TestWithObserver checks that every fenced write form is reported once with its
// result, refusals included, and that lockmetrics counts them under the adapter.
func TestWithObserver(t *testing.T) {
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	m, err := lockmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, redisfence.WithObserver(rec))
	em := newEnv(t, redisfence.WithObserver(m))
	ctx := t.Context()
	for i, s := range []*redisfence.Store{e.store, em.store} {
		res := e.res(string(rune('a' + i)))
		k := e.key(res, "k")
		_ = s.Set(ctx, fence.NewGrant(res, 2), k, "v", 0)
		_ = s.HSet(ctx, fence.NewGrant(res, 1), e.key(res, "h"), map[string]any{"f": 1})
		_ = s.Delete(ctx, fence.NewGrant(res, 2), k)
		_ = s.Fenced(ctx, fence.NewGrant(res, 3), func(tx redis.Pipeliner) error { return nil })
		_, _ = s.Get(ctx, fence.NewGrant(res, 3), k) // a read: not reported
	}
	want := []string{
		"redisfence set accepted",
		"redisfence hset fence: stale token 1",
		"redisfence delete accepted",
		"redisfence fenced accepted",
	}
	if len(rec.writes) != len(want) {
		t.Fatalf("observed %q, want %d writes", rec.writes, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(rec.writes[i], w) {
			t.Errorf("write %d observed as %q, want %q", i, rec.writes[i], w)
		}
	}
	const counted = `
# HELP fencegate_fenced_writes_total Fenced writes by adapter and result: accepted, stale (refused, a higher token is stored), lost (refused, the lock is known lost), error.
# TYPE fencegate_fenced_writes_total counter
fencegate_fenced_writes_total{adapter="redisfence",result="accepted"} 3
fencegate_fenced_writes_total{adapter="redisfence",result="stale"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(counted), "fencegate_fenced_writes_total"); err != nil {
		t.Fatal(err)
	}
}
