package redisfence

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
)

// Value is a string key read for a read-modify-write: its value and the token
// stored for its resource when it was read (the mark: the highest token that has
// written any key of the resource through the Store, 0 for none).
type Value struct {
	Val   string
	Token fence.Token
}

// Hash is a hash key read for a read-modify-write: its fields and the resource's
// stored token, as for Value.
type Hash struct {
	Fields map[string]string
	Token  fence.Token
}

// Get reads the string at key for a read-modify-write under grant g, with the
// resource's stored token, in one atomic step (a script). When the stored token is
// higher than g's, a newer holder has written: Get returns a *fence.StaleError and
// no value, since whatever this holder computes from it is stale. The write-back is
// a fenced Set, HSet or Fenced under the same grant: it lands only if no higher
// token has been stored since, so a read-modify-write under a lock cannot lose a
// newer holder's update.
//
// A missing key, or one deleted through Delete, is fence.ErrNotFound (naming the
// deleting token). Before any I/O Get returns Set's errors for the grant and key
// (fence.ErrInvalidArgument, fence.ErrLost). A key holding another type is Redis's
// WRONGTYPE error. A read is sent again by go-redis after a broken connection, as
// any read is.
func (s *Store) Get(ctx context.Context, g fence.Grant, key string) (Value, error) {
	r, tok, err := s.readKey(ctx, g, key, "string")
	if err != nil {
		return Value{}, err
	}
	v, ok := r.(string)
	if !ok {
		return Value{}, fmt.Errorf("redisfence: get %s: unexpected reply %v", key, r)
	}
	return Value{Val: v, Token: tok}, nil
}

// HGetAll reads every field of the hash at key for a read-modify-write under g, as
// Get reads a string: an empty or missing hash is fence.ErrNotFound. Errors are
// Get's.
func (s *Store) HGetAll(ctx context.Context, g fence.Grant, key string) (Hash, error) {
	r, tok, err := s.readKey(ctx, g, key, "hash")
	if err != nil {
		return Hash{}, err
	}
	a, _ := r.([]any)
	h := Hash{Fields: make(map[string]string, len(a)/2), Token: tok}
	for i := 0; i+1 < len(a); i += 2 {
		h.Fields[str(a[i])] = str(a[i+1])
	}
	return h, nil
}

// readKey runs the read script: the value (nil when missing), the mark, or the
// refusal.
func (s *Store) readKey(ctx context.Context, g fence.Grant, key, kind string) (any, fence.Token, error) {
	if err := s.usable(); err != nil {
		return nil, 0, err
	}
	if err := checkSingle(g); err != nil {
		return nil, 0, err
	}
	mark := MarkKey(g.Resource())
	if err := s.checkKey(g.Resource(), mark, key); err != nil {
		return nil, 0, err
	}
	keys := []string{mark, key}
	c := redis.NewCmd(ctx, "evalsha", s.read.sha, 2, mark, key, kind)
	err := s.rdb.Process(ctx, c)
	if isNoScript(err) {
		c = redis.NewCmd(ctx, "eval", s.read.src, len(keys), mark, key, kind)
		err = s.rdb.Process(ctx, c)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("redisfence: read %s: %w", key, err)
	}
	r, ok := c.Val().([]any)
	if !ok || len(r) < 1 {
		return nil, 0, fmt.Errorf("redisfence: read %s: unexpected reply %v", key, c.Val())
	}
	tok, err := parseToken(r[0])
	if err != nil {
		return nil, 0, err
	}
	if tok > g.Token() {
		return nil, 0, stale(g.Resource(), g.Token(), tok)
	}
	var v, deleted any
	if len(r) > 1 {
		v = r[1]
	}
	if len(r) > 2 {
		deleted = r[2]
	}
	if a, ok := v.([]any); v == nil || (ok && len(a) == 0) {
		d, _ := parseToken(deleted)
		return nil, 0, notFound(key, d)
	}
	return v, tok, nil
}
