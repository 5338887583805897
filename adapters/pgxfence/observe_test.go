package pgxfence_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence"
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
	for _, pipelined := range []bool{false, true} {
		t.Run(map[bool]string{false: "fence-first", true: "pipelined"}[pipelined], func(t *testing.T) {
			pool := newPool(t)
			ctx := t.Context()
			rec := &writeRecorder{}
			opts := []pgxfence.Option{pgxfence.WithObserver(rec)}
			if !pipelined {
				opts = append(opts, pgxfence.WithFenceFirst())
			}
			s, err := pgxfence.New(pool, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "CREATE TABLE obs (k text PRIMARY KEY, v bigint NOT NULL, fence_token bigint NOT NULL DEFAULT 0); INSERT INTO obs (k, v) VALUES ('a', 1)"); err != nil {
				t.Fatal(err)
			}
			row := fence.Row{Table: "obs", Key: []fence.Col{{Name: "k", Value: "a"}}}
			write := func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "UPDATE obs SET v = v + 1 WHERE k = 'a'")
				return err
			}
			if err := s.Fenced(ctx, fence.NewGrant("acct", 5), write); err != nil {
				t.Fatal(err)
			}
			if err := s.Fenced(ctx, fence.NewGrant("acct", 4), write); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("stale Fenced: %v", err)
			}
			if err := s.Update(ctx, fence.NewGrant("acct", 7), row, fence.Col{Name: "v", Value: 2}); err != nil {
				t.Fatal(err)
			}
			if err := s.Update(ctx, fence.NewGrant("acct", 6), row, fence.Col{Name: "v", Value: 3}); !errors.Is(err, fence.ErrStale) {
				t.Fatalf("stale Update: %v", err)
			}
			boom := errors.New("boom")
			if err := s.Fenced(ctx, fence.NewGrant("acct", 8), func(pgx.Tx) error { return boom }); !errors.Is(err, boom) {
				t.Fatalf("failing Fenced: %v", err)
			}
			want := []string{"pgxfence fenced accepted", "pgxfence fenced stale", "pgxfence update accepted", "pgxfence update stale", "pgxfence fenced error"}
			if !slices.Equal(rec.seen, want) {
				t.Errorf("observed %q, want %q", rec.seen, want)
			}
		})
	}
}
