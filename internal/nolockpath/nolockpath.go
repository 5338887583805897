// Package nolockpath is what pgxfence and sqlfence share on the no-lock path, where
// one row decides: the checks of an idempotency key and its TTL, the bounds on
// Once's and Decrement's rounds, Decrement's one path (what a take that changed
// nothing means), and the jittered pause between rounds.
package nolockpath

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

// CheckOnce refuses (fence.ErrInvalidArgument) a call to Once that cannot run: no
// function (nilFn), or a key or fingerprint CheckIdemKey refuses.
func CheckOnce(key, fingerprint string, nilFn bool) error {
	if nilFn {
		return fmt.Errorf("%w: nil function", fence.ErrInvalidArgument)
	}
	return CheckIdemKey(key, fingerprint)
}

// TakeArgs returns a take's arguments (n, the key's values, n again), or
// fence.ErrInvalidArgument when n is not a positive amount.
func TakeArgs(c nolock.Counter, n int64) ([]any, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: decrement of %q by %d: the amount must be > 0", fence.ErrInvalidArgument, c.Table, n)
	}
	args := make([]any, 0, len(c.Key)+2)
	args = append(args, n)
	for _, k := range c.Key {
		args = append(args, k.Value)
	}
	return append(args, n), nil
}

// CheckIdemKey refuses (fence.ErrInvalidArgument) what idempotency_keys cannot store
// alike on every database: an empty key or one over nolock.MaxKeyLen bytes, text that
// is not UTF-8 or holds a NUL, a fingerprint over MaxFingerprintLen characters.
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

// CheckKeyTTL refuses (fence.ErrInvalidArgument) a WithKeyTTL under the microsecond
// an expiry is stored to.
func CheckKeyTTL(ttl time.Duration) error {
	if ttl < time.Microsecond {
		return fmt.Errorf("WithKeyTTL(%v): under the 1µs precision stored: %w", ttl, fence.ErrInvalidArgument)
	}
	return nil
}

// The no-lock path's bounds: each round is a fresh statement or transaction, so they
// limit work, never correctness.
const (
	MaxOnceAttempts   = 10   // Once's starts over after a lock conflict met before fn ran
	MaxClaimTries     = 3    // claim, drop an expired key, claim again, once more for a race
	PurgeBatch        = 1000 // expired keys one DELETE of PurgeExpiredKeys removes
	MaxDecrementLooks = 3    // takes again when a take changed nothing yet enough is left
)

// TakeRefused is what the look after a take that changed nothing means: no row
// (fence.ErrNotFound), under n left (nolock.ErrInsufficient), or nil: take again.
func TakeRefused(c nolock.Counter, n, left int64, found bool, try int) error {
	switch {
	case !found:
		return fmt.Errorf("%w: %s where %s", fence.ErrNotFound, c.Table, DescribeKey(c.Key))
	case left < n || try >= MaxDecrementLooks:
		return fmt.Errorf("%w in %q: wanted %d, %d left", nolock.ErrInsufficient, c.Table, n, left)
	}
	return nil
}

// Decrement is the guarded take's one path, every adapter's: take runs the take with
// args (TakeArgs's: n, the key's values, n) and says whether it took; when it took
// nothing, look reads what is left from the key's values (found: the row exists), and
// TakeRefused says what that means or to take again. take's and look's errors are
// returned as they are.
func Decrement(c nolock.Counter, n int64, args []any,
	take func(args []any) (left int64, took bool, err error),
	look func(keyArgs []any) (left int64, found bool, err error)) (int64, error) {
	for try := 1; ; try++ {
		left, took, err := take(args)
		if err != nil {
			return 0, err
		}
		if took {
			return left, nil
		}
		left, found, err := look(args[1 : len(args)-1])
		if err != nil {
			return 0, err
		}
		if err := TakeRefused(c, n, left, found, try); err != nil {
			return left, err
		}
	}
}

// DescribeKey writes a row's key for an error: "k1 = v1 AND k2 = v2".
func DescribeKey(key []fence.Col) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = fmt.Sprintf("%s = %v", k.Name, k.Value)
	}
	return strings.Join(parts, " AND ")
}

// Pause waits a jittered *wait (half to one and a half of it), then doubles it up to
// most; context.Cause(ctx) when ctx ends first.
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
