package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

func TestCheckIdemKey(t *testing.T) {
	tests := []struct {
		name, key, fingerprint string
		ok                     bool
	}{
		{"plain", "order-1", "sha256:ab", true},
		{"longest key", strings.Repeat("k", nolock.MaxKeyLen), "", true},
		{"longest fingerprint in characters", "k", strings.Repeat("ü", engine.MaxFingerprintLen), true},
		{"empty key", "", "fp", false},
		{"key too long", strings.Repeat("k", nolock.MaxKeyLen+1), "fp", false},
		{"key not UTF-8", "k\xff", "fp", false},
		{"key with NUL", "k\x00", "fp", false},
		{"fingerprint not UTF-8", "k", "f\xff", false},
		{"fingerprint with NUL", "k", "f\x00", false},
		{"fingerprint too long", "k", strings.Repeat("f", engine.MaxFingerprintLen+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := engine.CheckIdemKey(tt.key, tt.fingerprint)
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
		err := engine.CheckKeyTTL(tt.ttl)
		if got := err == nil; got != tt.want {
			t.Errorf("CheckKeyTTL(%v) = %v, want accepted %v", tt.ttl, err, tt.want)
		}
		if err != nil && !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("CheckKeyTTL(%v) = %v, want fence.ErrInvalidArgument", tt.ttl, err)
		}
	}
}
