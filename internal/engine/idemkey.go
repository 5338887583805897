package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// MaxFingerprintLen is the idempotency_keys.fingerprint limit, in characters.
const MaxFingerprintLen = 255

// CheckIdemKey refuses, with fence.ErrInvalidArgument, what idempotency_keys cannot store
// alike on every database: an empty key, a key over nolock.MaxKeyLen bytes, a key or
// fingerprint that is not UTF-8 or holds a NUL byte (PostgreSQL text cannot), and a
// fingerprint over MaxFingerprintLen characters.
func CheckIdemKey(key, fingerprint string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty idempotency key", fence.ErrInvalidArgument)
	case len(key) > nolock.MaxKeyLen:
		return fmt.Errorf("%w: idempotency key is %d bytes, the limit is %d", fence.ErrInvalidArgument, len(key), nolock.MaxKeyLen)
	case !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: idempotency key %q is not UTF-8 text without NUL bytes", fence.ErrInvalidArgument, key)
	case !utf8.ValidString(fingerprint) || strings.IndexByte(fingerprint, 0) >= 0:
		return fmt.Errorf("%w: fingerprint %q is not UTF-8 text without NUL bytes", fence.ErrInvalidArgument, fingerprint)
	case utf8.RuneCountInString(fingerprint) > MaxFingerprintLen:
		return fmt.Errorf("%w: fingerprint is %d characters, the limit is %d (store a hash of the request)", fence.ErrInvalidArgument, utf8.RuneCountInString(fingerprint), MaxFingerprintLen)
	}
	return nil
}

// CheckKeyTTL refuses, with an error naming the option WithKeyTTL and wrapping
// fence.ErrInvalidArgument, a time-to-live for idempotency keys under one
// microsecond, the precision the expiry is stored with.
func CheckKeyTTL(ttl time.Duration) error {
	if ttl < time.Microsecond {
		return fmt.Errorf("WithKeyTTL(%v): under the 1µs precision stored: %w", ttl, fence.ErrInvalidArgument)
	}
	return nil
}

// How often the no-lock path's loops go round; each round is a fresh statement or
// transaction, so the bounds limit work, never correctness.
const (
	// MaxOnceAttempts bounds how often Once starts over when the key's claim meets a
	// lock conflict (a deadlock, a lock wait timeout, a serialization failure, a busy
	// SQLite) before fn has run.
	MaxOnceAttempts = 10
	// MaxClaimTries: claim, drop an expired key and claim again, once more for a race.
	MaxClaimTries = 3
	// PurgeBatch is how many expired keys one DELETE of PurgeExpiredKeys removes.
	PurgeBatch = 1000
	// MaxDecrementLooks bounds how often Decrement takes again when its guarded
	// UPDATE changed nothing yet the look that follows finds enough left.
	MaxDecrementLooks = 3
)

// TakeRefused is what the look after a guarded take that changed nothing found: the
// row missing (fence.ErrNotFound), less than n left (nolock.ErrInsufficient, with
// left), or enough left, nil: take again, unless this was the last try.
func TakeRefused(c nolock.Counter, n, left int64, found bool, try int) error {
	switch {
	case !found:
		return fmt.Errorf("%w: %s where %s", fence.ErrNotFound, c.Table, DescribeKey(c.Key))
	case left < n || try >= MaxDecrementLooks:
		return fmt.Errorf("%w in %q: wanted %d, %d left", nolock.ErrInsufficient, c.Table, n, left)
	}
	return nil
}

// DescribeKey writes a row's key for an error: "k1 = v1 AND k2 = v2".
func DescribeKey(key []fence.Col) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = fmt.Sprintf("%s = %v", k.Name, k.Value)
	}
	return strings.Join(parts, " AND ")
}

// Pause waits about *wait (half to one and a half of it: jitter keeps retrying
// writers apart) and doubles *wait up to most; it returns context.Cause(ctx) when
// ctx ends first.
func Pause(ctx context.Context, wait *time.Duration, most time.Duration) error {
	t := time.NewTimer(*wait/2 + rand.N(*wait))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
	}
	*wait = min(2**wait, most)
	return nil
}
