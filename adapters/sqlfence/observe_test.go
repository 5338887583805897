package sqlfence_test

import (
	"bytes"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/observe"
)

// writeRecorder is a fence.WriteObserver that keeps what it was told.
type writeRecorder struct {
	mu   sync.Mutex
	seen []string // "adapter op result"
}

func (r *writeRecorder) FencedWrite(adapter, op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, adapter+" "+op+" "+observe.Result(err))
}

func TestStore_WithObserver_WithLogger(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db, _ := b.open(t)
			rec := &writeRecorder{}
			var logs bytes.Buffer // written only by this goroutine's calls
			s, err := sqlfence.New(db, b.d,
				sqlfence.WithObserver(rec),
				sqlfence.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			mustExec(t, db, "CREATE TABLE obs (k VARCHAR(20) PRIMARY KEY, v BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0)")
			mustExec(t, db, "INSERT INTO obs (k, v) VALUES ('a', 1)")
			row := fence.Row{Table: "obs", Key: []fence.Col{{Name: "k", Value: "a"}}}
			noop := func(*sql.Tx) error { return nil }

			if err := s.Fenced(ctx, fence.NewGrant("acct", 5), noop); err != nil {
				t.Fatal(err)
			}
			if err := s.Fenced(ctx, fence.NewGrant("acct", 4), noop); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("stale Fenced: %v", err)
			}
			if err := s.Update(ctx, fence.NewGrant("acct", 7), row, fence.Col{Name: "v", Value: 2}); err != nil {
				t.Fatal(err)
			}
			if err := s.Update(ctx, fence.NewGrant("acct", 6), row, fence.Col{Name: "v", Value: 3}); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("stale Update: %v", err)
			}
			boom := errors.New("boom")
			if err := s.Fenced(ctx, fence.NewGrant("acct", 8), func(*sql.Tx) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("failing Fenced: %v", err)
			}
			done := make(chan struct{})
			close(done)
			lost := lostGrant{fence.NewGrant("acct", 9), done}
			if err := s.Update(ctx, lost, row, fence.Col{Name: "v", Value: 4}); !errors.Is(err, fence.ErrLost) {
				t.Fatalf("Update with a lost grant: %v", err)
			}
			want := []string{"sqlfence fenced accepted", "sqlfence fenced stale", "sqlfence update accepted", "sqlfence update stale", "sqlfence fenced error", "sqlfence update lost"}
			if !slices.Equal(rec.seen, want) {
				t.Errorf("observed %q, want %q", rec.seen, want)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("want 3 refusals logged, got %q", lines)
			}
			for i, want := range []string{
				`"msg":"fenced write refused","adapter":"sqlfence","dialect":"` + b.d.String() + `","op":"fenced","resource":"acct","token":4,"result":"stale","stored_token":5`,
				`"op":"update","resource":"acct","token":6,"result":"stale","stored_token":7`,
				`"op":"update","resource":"acct","token":9,"result":"lost"}`,
			} {
				if !strings.Contains(lines[i], want) {
					t.Errorf("log line %d = %s, want it to contain %s", i, lines[i], want)
				}
			}
		})
	}
}

// lostGrant is a grant whose lock is known lost, as a *lockclient.Lock after
// its Done closed.
type lostGrant struct {
	fence.Grant
	done chan struct{}
}

func (g lostGrant) Done() <-chan struct{} { return g.done }
