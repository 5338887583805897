package fencedtx_test

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/fencedtx"
	"github.com/fencegate/fencegate/internal/grant"
)

// tx records what RunTx asked of it.
type tx struct {
	refused               error
	committed, rolledBack bool
	commit                func()
}

func (t *tx) FnErr(err error) error { return err }
func (t *tx) Refused() error        { return t.refused }
func (t *tx) Commit() error {
	if t.commit != nil {
		t.commit()
	}
	t.committed = true
	return nil
}
func (t *tx) Rollback() { t.rolledBack = true }

func checked(t *testing.T, g fence.Grant) *grant.Checked {
	t.Helper()
	c, err := grant.Check(g)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type watchedTx struct {
	fence.Grant
	done chan struct{}
}

func (w watchedTx) Done() <-chan struct{} { return w.done }

// TestRun_outcomes checks when RunTx commits and when it rolls back.
func TestRun_outcomes(t *testing.T) {
	boom := errors.New("fn failed")
	stale := &fence.StaleError{Resource: "r", Presented: 1, Seen: 2}
	closed := make(chan struct{})
	close(closed)
	live := watchedTx{fence.NewGrant("r", 1), make(chan struct{})}
	tests := []struct {
		name       string
		g          fence.Grant
		fnErr      error
		refused    error
		want       error
		wantCommit bool
	}{
		{"commits", live, nil, nil, nil, true},
		{"fn fails", live, boom, nil, boom, false},
		{"swallowed refusal", live, nil, stale, fence.ErrStale, false},
		{"refusal and fn error", live, boom, stale, boom, false},
		{"lost before commit", watchedTx{fence.NewGrant("r", 1), closed}, nil, nil, fence.ErrLost, false},
		{"lost while fn ran", live, nil, nil, fence.ErrLost, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &tx{refused: tt.refused}
			var c *grant.Checked
			if tt.name == "lost while fn ran" {
				done := make(chan struct{})
				c = checked(t, watchedTx{fence.NewGrant("r", 1), done})
				err := fencedtx.Run(c, h, 0, func(int) error { close(done); return nil })
				if !errors.Is(err, fence.ErrLost) || h.committed || !h.rolledBack {
					t.Fatalf("RunTx() = %v, committed = %v, rolled back = %v", err, h.committed, h.rolledBack)
				}
				return
			}
			if tt.name == "lost before commit" {
				// fence.CheckGrant refuses it at the door, before any I/O.
				if _, err := grant.Check(tt.g); !errors.Is(err, fence.ErrLost) {
					t.Fatalf("Check() = %v, want ErrLost", err)
				}
				return
			}
			c = checked(t, tt.g)
			err := fencedtx.Run(c, h, 0, func(int) error { return tt.fnErr })
			committed, rolledBack := h.committed, h.rolledBack
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("RunTx() = %v, want %v", err, tt.want)
			}
			if tt.refused != nil && tt.fnErr != nil && !errors.Is(err, fence.ErrStale) {
				t.Fatalf("RunTx() = %v lost the refusal", err)
			}
			if committed != tt.wantCommit || rolledBack == tt.wantCommit {
				t.Fatalf("committed = %v, rolled back = %v", committed, rolledBack)
			}
		})
	}
}

func TestRun_panicRollsBack(t *testing.T) {
	rolledBack := false
	defer func() {
		if recover() == nil || !rolledBack {
			t.Fatalf("panic recovered: rolled back = %v", rolledBack)
		}
	}()
	h := &tx{commit: func() { t.Fatal("committed after a panic") }}
	defer func() { rolledBack = h.rolledBack }()
	_ = fencedtx.Run(checked(t, fence.NewGrant("r", 1)), h, 0, func(int) error { panic("boom") })
}

func TestApply(t *testing.T) {
	type store struct{ n int }
	type option func(*store) error
	bad := errors.New("bad option")
	inc := func(s *store) error { s.n++; return nil }
	s := &store{}
	if err := fencedtx.Apply(s, []option{inc, nil, inc}); err != nil || s.n != 2 {
		t.Fatalf("Apply = %v, n = %d; want nil, 2 (a nil option skipped)", err, s.n)
	}
	if err := fencedtx.Apply(s, []option{func(*store) error { return bad }, inc}); err != bad || s.n != 2 {
		t.Fatalf("Apply = %v, n = %d; want the first error, and no option after it", err, s.n)
	}
}
