package fencetx_test

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/fencetx"
)

type watched struct {
	fence.Grant
	done chan struct{}
}

func (w watched) Done() <-chan struct{} { return w.done }

// TestRun_outcomes checks when Run commits and when it rolls back.
func TestRun_outcomes(t *testing.T) {
	boom := errors.New("fn failed")
	stale := &fence.StaleError{Resource: "r", Presented: 1, Seen: 2}
	closed := make(chan struct{})
	close(closed)
	live := watched{fence.NewGrant("r", 1), make(chan struct{})}
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
		{"lost before commit", watched{fence.NewGrant("r", 1), closed}, nil, nil, fence.ErrLost, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			committed, rolledBack := false, false
			err := fencetx.Run(tt.g, func() error { return tt.fnErr }, fencetx.Ops{
				Commit:   func() error { committed = true; return nil },
				Rollback: func() { rolledBack = true },
				Refused:  func() error { return tt.refused },
			})
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Run() = %v, want %v", err, tt.want)
			}
			if tt.refused != nil && tt.fnErr != nil && !errors.Is(err, fence.ErrStale) {
				t.Fatalf("Run() = %v lost the refusal", err)
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
	_ = fencetx.Run(fence.NewGrant("r", 1), func() error { panic("boom") }, fencetx.Ops{
		Commit:   func() error { t.Fatal("committed after a panic"); return nil },
		Rollback: func() { rolledBack = true },
	})
}
