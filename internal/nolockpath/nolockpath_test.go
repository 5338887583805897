package nolockpath_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/nolock"
)

func TestCheckIdemKey(t *testing.T) {
	tests := []struct {
		name, key, fingerprint string
		ok                     bool
	}{
		{"plain", "order-1", "sha256:ab", true},
		{"longest key", strings.Repeat("k", nolock.MaxKeyLen), "", true},
		{"longest fingerprint in characters", "k", strings.Repeat("ü", nolockpath.MaxFingerprintLen), true},
		{"empty key", "", "fp", false},
		{"key too long", strings.Repeat("k", nolock.MaxKeyLen+1), "fp", false},
		{"key not UTF-8", "k\xff", "fp", false},
		{"key with NUL", "k\x00", "fp", false},
		{"fingerprint not UTF-8", "k", "f\xff", false},
		{"fingerprint with NUL", "k", "f\x00", false},
		{"fingerprint too long", "k", strings.Repeat("f", nolockpath.MaxFingerprintLen+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := nolockpath.CheckIdemKey(tt.key, tt.fingerprint)
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, fence.ErrInvalidArgument)) {
				t.Fatalf("CheckIdemKey(%q, %q) = %v, want ok=%v or ErrInvalidArgument", tt.key, tt.fingerprint, err, tt.ok)
			}
		})
	}
}

func TestCheckKeyTTL(t *testing.T) {
	tests := []struct {
		ttl  time.Duration
		want bool // accepted
	}{
		{-time.Second, false},
		{0, false},
		{time.Microsecond - 1, false},
		{time.Microsecond, true},
		{24 * time.Hour, true},
	}
	for _, tt := range tests {
		err := nolockpath.CheckKeyTTL(tt.ttl)
		if got := err == nil; got != tt.want {
			t.Errorf("CheckKeyTTL(%v) = %v, want accepted %v", tt.ttl, err, tt.want)
		}
		if err != nil && !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("CheckKeyTTL(%v) = %v, want fence.ErrInvalidArgument", tt.ttl, err)
		}
	}
}

func TestTakeRefused(t *testing.T) {
	c := nolock.Counter{Table: "stock", Column: "left", Key: []fence.Col{{Name: "sku", Value: "a-1"}}}
	tests := []struct {
		name      string
		left      int64
		found     bool
		try       int
		want      error // nil: take again
		wantInMsg string
	}{
		{"missing row", 0, false, 1, fence.ErrNotFound, "stock where sku = a-1"},
		{"too little left", 2, true, 1, nolock.ErrInsufficient, "wanted 5, 2 left"},
		{"enough left: take again", 7, true, 1, nil, ""},
		{"enough left on the last try", 7, true, nolockpath.MaxDecrementLooks, nolock.ErrInsufficient, "wanted 5, 7 left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := nolockpath.TakeRefused(c, 5, tt.left, tt.found, tt.try)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("TakeRefused = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantInMsg) {
				t.Fatalf("TakeRefused = %v, want %v naming %q", err, tt.want, tt.wantInMsg)
			}
		})
	}
}

func TestPause_ctxEnded(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	cause := errors.New("caller gave up")
	cancel(cause)
	wait := time.Hour
	if err := nolockpath.Pause(ctx, &wait, 2*time.Hour); err != cause {
		t.Fatalf("Pause = %v, want the ctx's cause", err)
	}
	if wait != time.Hour {
		t.Fatalf("wait = %v after an ended ctx, want it unchanged", wait)
	}
}

func TestPause_doubles(t *testing.T) {
	wait := time.Microsecond
	for _, want := range []time.Duration{2 * time.Microsecond, 3 * time.Microsecond, 3 * time.Microsecond} {
		if err := nolockpath.Pause(t.Context(), &wait, 3*time.Microsecond); err != nil {
			t.Fatal(err)
		}
		if wait != want {
			t.Fatalf("wait = %v, want %v", wait, want)
		}
	}
}

func TestCheckOnce(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		nilFn bool
		want  string // "" when the call may run
	}{
		{"runs", "order-1", false, ""},
		{"nil function", "order-1", true, "nil function"},
		{"bad key", "", false, "empty idempotency key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := nolockpath.CheckOnce(tt.key, "fp", tt.nilFn)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckOnce = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckOnce = %v, want ErrInvalidArgument saying %q", err, tt.want)
			}
		})
	}
}

func TestTakeArgs(t *testing.T) {
	c := nolock.Counter{Table: "stock", Column: "left", Key: []fence.Col{{Name: "sku", Value: "a"}, {Name: "shop", Value: 7}}}
	args, err := nolockpath.TakeArgs(c, 3)
	if err != nil || len(args) != 4 || args[0] != int64(3) || args[1] != "a" || args[2] != 7 || args[3] != int64(3) {
		t.Fatalf("TakeArgs(c, 3) = %v, %v, want [3 a 7 3]", args, err)
	}
	for _, n := range []int64{0, -1} {
		if _, err := nolockpath.TakeArgs(c, n); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), `"stock"`) {
			t.Fatalf("TakeArgs(c, %d) = %v, want ErrInvalidArgument naming the table", n, err)
		}
	}
}
