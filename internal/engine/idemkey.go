package engine

import (
	"fmt"
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
