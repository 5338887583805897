package pgxfence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// TestStore_endedLock: a write under a lock released or whose Client was closed is
// fence.ErrLost saying which (and matching lockclient's sentinel), at the door and
// when the lock ends while fn runs; nothing is written.
func TestStore_endedLock(t *testing.T) {
	ctx := t.Context()
	srv := locktest.Start(t)
	pool := newPool(t)
	mustExec(t, pool, "CREATE TABLE ended (id int PRIMARY KEY, v int NOT NULL, fence_token bigint NOT NULL DEFAULT 0)")
	mustExec(t, pool, "INSERT INTO ended VALUES (1, 0, 0)")
	s := newStore(pool)
	row := fence.Row{Table: "ended", Key: []fence.Col{{Name: "id", Value: 1}}}
	write := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE ended SET v = v + 1 WHERE id = 1")
		return err
	}
	released := func(l *lockclient.Lock, _ *lockclient.Client) error { return l.Release(ctx) }
	closed := func(_ *lockclient.Lock, lc *lockclient.Client) error { return lc.Close() }
	tests := []struct {
		name  string
		end   func(*lockclient.Lock, *lockclient.Client) error
		cause error
		says  string
		while bool // the lock ends while fn runs, not before the write
		write func(l *lockclient.Lock, end func() error) error
	}{
		{"Exec after Release", released, lockclient.ErrReleased, "released", false,
			func(l *lockclient.Lock, _ func() error) error { return fence.Exec(ctx, s, l, write) }},
		{"Exec after Close", closed, lockclient.ErrClosed, "closed", false,
			func(l *lockclient.Lock, _ func() error) error { return fence.Exec(ctx, s, l, write) }},
		{"Update after Release", released, lockclient.ErrReleased, "released", false,
			func(l *lockclient.Lock, _ func() error) error {
				return s.Update(ctx, l, row, fence.Col{Name: "v", Value: 9})
			}},
		{"released while fn ran", released, lockclient.ErrReleased, "released", true,
			func(l *lockclient.Lock, end func() error) error {
				return fence.Exec(ctx, s, l, func(tx pgx.Tx) error {
					if err := write(tx); err != nil {
						return err
					}
					return end()
				})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc, err := lockclient.New(srv.Client(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lc.Close() })
			l, err := lc.Acquire(ctx, "ended-1")
			if err != nil {
				t.Fatal(err)
			}
			end := func() error { return tt.end(l, lc) }
			if !tt.while {
				if err := end(); err != nil {
					t.Fatal(err)
				}
			}
			err = tt.write(l, end)
			if !errors.Is(err, fence.ErrLost) || !errors.Is(err, tt.cause) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("err = %v, want fence.ErrLost saying %s (%v)", err, tt.says, tt.cause)
			}
			if got := mustInt(t, pool, "SELECT v FROM ended WHERE id = 1"); got != 0 {
				t.Fatalf("v = %d: the write under an ended lock landed", got)
			}
		})
	}
}
