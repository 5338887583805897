package redisfence

import (
	"context"
	"encoding"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
)

// Set stores value at key for grant g, as SET does, in one round trip: a script
// that refuses g's token if the resource's mark holds a higher one
// (*fence.StaleError naming it, nothing written) and otherwise sets the key and
// raises the mark, atomically. expiration is SET's: 0 for none, redis.KeepTTL to
// keep the key's, else at least a millisecond (sent as PX). value is what
// go-redis sends for SET: a string, []byte, number, bool, time.Time or an
// encoding.BinaryMarshaler.
//
// Before any I/O Set returns fence.ErrInvalidArgument for a bad grant (a
// fence.Set of several resources too: fence them in Fenced), an empty key, a key
// beginning "fencegate:" or, on a Cluster, outside the resource's slot, and a
// nil or unsupported value or bad expiration; fence.ErrLost for a lost Watched
// grant. A script sent whose reply was lost is fence.ErrCommitUnknown, never sent
// again. Error replies from Redis are returned wrapped.
func (s *Store) Set(ctx context.Context, g fence.Grant, key string, value any, expiration time.Duration) (err error) {
	defer s.observe("set", &err)
	if err := checkValue(value); err != nil {
		return err
	}
	px := ""
	switch {
	case expiration == redis.KeepTTL:
		px = "keepttl"
	case expiration < 0 || (expiration > 0 && expiration < time.Millisecond):
		return invalid("expiration %v: want 0, redis.KeepTTL or at least 1ms", expiration)
	case expiration > 0:
		px = strconv.FormatInt(expiration.Milliseconds(), 10)
	}
	return s.single(ctx, g, "set", key, "set", value, px)
}

// HSet sets fields of the hash at key for grant g, as HSET does, fenced like Set
// in one round trip. fields must not be empty; each value is what go-redis sends
// for HSET. Errors are Set's; a key holding another type than a hash is Redis's
// WRONGTYPE error, with nothing written and the mark as it was.
func (s *Store) HSet(ctx context.Context, g fence.Grant, key string, fields map[string]any) (err error) {
	defer s.observe("hset", &err)
	if len(fields) == 0 {
		return invalid("HSet of %q with no fields", key)
	}
	args := make([]any, 0, 2*len(fields))
	for f, v := range fields {
		if err := checkValue(v); err != nil {
			return fmt.Errorf("field %q: %w", f, err)
		}
		args = append(args, f, v)
	}
	return s.single(ctx, g, "hset", key, append([]any{"hset"}, args...)...)
}

// Delete deletes key for grant g, fenced like Set in one round trip, and leaves a
// tombstone: the resource's mark remembers that g's token deleted the key. The
// key itself is gone, for every reader; Get and HGetAll report it as
// fence.ErrNotFound naming the deleting token, and a writer with a lower token
// cannot bring it back (the mark refuses it). A later accepted write of the key
// clears the tombstone. Deleting a missing key is not an error; it raises the mark
// and leaves the tombstone all the same. Errors are Set's.
func (s *Store) Delete(ctx context.Context, g fence.Grant, key string) (err error) {
	defer s.observe("delete", &err)
	return s.single(ctx, g, "delete", key, "del")
}

// single checks and sends one single-key fenced write: form and its arguments.
func (s *Store) single(ctx context.Context, g fence.Grant, op, key string, args ...any) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := checkSingle(g); err != nil {
		return err
	}
	res := g.Resource()
	mark := MarkKey(res)
	if err := s.checkKey(res, mark, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tok := strconv.FormatInt(int64(g.Token()), 10)
	reply, w, err := s.run(ctx, s.write, []string{mark, key}, append([]any{tok}, args...), writeAccepted)
	if err != nil {
		return s.failed(g, op+" "+key, err)
	}
	if reply == int64(1) {
		return w.check(s)
	}
	if r, ok := reply.([]any); ok && len(r) == 2 && r[0] == int64(0) {
		seen, err := parseToken(r[1])
		if err != nil {
			return err
		}
		return stale(res, g.Token(), seen)
	}
	return fmt.Errorf("redisfence: %s %s: unexpected reply %v", op, key, reply)
}

// writeAccepted reports whether the write script's reply says it wrote: 1.
func writeAccepted(reply any) bool { return reply == int64(1) }

// failed classifies the error of a fenced write's script: a reply from Redis
// (the script did not run, or failed before writing), a command never sent, or
// else an outcome that cannot be known.
func (s *Store) failed(g fence.Grant, what string, err error) error {
	if serverError(err) || unsent(err) {
		return fmt.Errorf("redisfence: %s: %w", what, err)
	}
	return fmt.Errorf("%w: %s for %q at token %d: %w", fence.ErrCommitUnknown, what, g.Resource(), g.Token(), err)
}

// checkValue refuses a value go-redis cannot send: nil, a typed nil, or a type it
// has no encoding for.
func checkValue(v any) error {
	if isNil(v) {
		return invalid("nil value (%T); use \"\" for an empty string", v)
	}
	switch v.(type) {
	case string, []byte, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
		float32, float64, bool, time.Time, time.Duration, encoding.BinaryMarshaler:
		return nil
	}
	return invalid("value of type %T: want a string, []byte, number, bool, time.Time or encoding.BinaryMarshaler", v)
}
