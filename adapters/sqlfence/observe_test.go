package sqlfence_test

import (
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
)

// writeRecorder is a fence.WriteObserver that keeps what it was told.
type writeRecorder struct {
	mu   sync.Mutex
	seen []string // "adapter op result"
}

func (r *writeRecorder) FencedWrite(adapter, op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, adapter+" "+op+" "+grant.WriteResult(err))
}

func TestStore_WithObserver(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db, _ := b.open(t)
			rec := &writeRecorder{}
			s, err := sqlfence.New(db, b.d,
				sqlfence.WithObserver(rec))
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
