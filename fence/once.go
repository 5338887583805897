package fence

import (
	"context"
	"fmt"
)

// Result is what an idempotent call returns: the stored result of the one run that
// committed, and whether this call is a replay of it.
type Result struct {
	Value    []byte
	Replayed bool
}

// KeyStore is implemented by the adapters' Stores that keep idempotency keys (the
// library's idempotency_keys table, created by the migrations package).
type KeyStore[Tx any] interface {
	// Once runs fn in a transaction that also inserts key with fingerprint and fn's
	// result, so the work and the key commit or roll back together. See the package
	// function Once for the contract.
	Once(ctx context.Context, key, fingerprint string, fn func(Tx) ([]byte, error)) (Result, error)
}

// MaxKeyLen is the longest idempotency key, in bytes.
const MaxKeyLen = 200

// Once runs fn at most once per idempotency key, the way payment APIs do: the first
// call with key runs fn and stores its result in the same transaction as fn's writes;
// a later call with the same key and fingerprint returns that result with
// Replayed = true and does not run fn. A concurrent duplicate waits for the first
// call's transaction and then replays its result, or runs fn itself if the first
// rolled back. ctx governs the transaction and the wait.
//
// It returns ErrKeyReused when key is stored with a different fingerprint (nothing
// runs), ErrInvalidArgument for an empty or overlong key, a nil store (typed nil
// included) or a nil fn, and
// fn's own error, after rolling back both fn's writes and the key so that a retry
// runs again.
func Once[Tx any](ctx context.Context, s KeyStore[Tx], key, fingerprint string, fn func(Tx) ([]byte, error)) (Result, error) {
	switch {
	case IsNil(s):
		return Result{}, fmt.Errorf("%w: nil store", ErrInvalidArgument)
	case fn == nil:
		return Result{}, fmt.Errorf("%w: nil function", ErrInvalidArgument)
	case key == "":
		return Result{}, fmt.Errorf("%w: empty idempotency key", ErrInvalidArgument)
	case len(key) > MaxKeyLen:
		return Result{}, fmt.Errorf("%w: idempotency key is %d bytes, the limit is %d", ErrInvalidArgument, len(key), MaxKeyLen)
	}
	return s.Once(ctx, key, fingerprint, fn)
}
