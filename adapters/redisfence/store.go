package redisfence

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/fence"
)

// Store makes fenced writes through a go-redis client: a *redis.Client (a single
// node, or a Sentinel-backed failover client) or a *redis.ClusterClient. It is
// safe for concurrent use and holds no state besides its settings and the
// server's command table, read on the first Fenced that queues a command; the
// scripts it runs are loaded by the server on first use.
type Store struct {
	rdb         redis.UniversalClient
	cluster     bool
	replicas    int
	waitTimeout time.Duration
	obs         fence.WriteObserver

	write, tx, read *script
	cmds            *commands
}

var (
	writeScript = newScript(writeLua)
	txScript    = newScript(txLua)
	readScript  = newScript(readLua)
)

// Option configures a Store.
type Option func(*Store) error

// WithObserver makes the Store report the result of every fenced write (Set,
// HSet, Delete, Fenced) to obs, with adapter "redisfence" and op "set", "hset",
// "delete" or "fenced": the lockmetrics package counts them. A nil obs, the
// default, reports nothing.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error {
		if isNil(obs) {
			obs = nil
		}
		s.obs = obs
		return nil
	}
}

// WithWaitReplicas makes every fenced write that was accepted wait until n
// replicas (1 to 100) acknowledged it, or timeout (1 ms or more) passed: Redis's
// WAIT, sent on the write's connection once its reply says it was accepted (a
// second round trip). Fewer acknowledgements return ErrNotReplicated; the write
// stands on the primary. A failover to an acknowledging replica keeps the write,
// mark and data, but Redis stays not strongly consistent (see Durability in the
// package doc). A write refused as stale returns at once, without WAIT. New
// refuses the option on a client that is neither a *redis.Client nor a
// *redis.ClusterClient (a Ring).
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(s *Store) error {
		if n < 1 || n > 100 {
			return invalid("WithWaitReplicas(%d, %v): want 1 to 100 replicas", n, timeout)
		}
		if timeout < time.Millisecond {
			return invalid("WithWaitReplicas(%d, %v): want a timeout of 1ms or more", n, timeout)
		}
		s.replicas, s.waitTimeout = n, timeout
		return nil
	}
}

// New returns a Store writing through rdb. It returns an error wrapping
// fence.ErrInvalidArgument, and a nil Store, for a nil rdb (a typed nil too) and an
// unusable option (the error names it). A nil Option is ignored.
func New(rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	if isNil(rdb) {
		return nil, invalid("nil Redis client")
	}
	s := &Store{rdb: rdb, write: writeScript, tx: txScript, read: readScript, cmds: newCommands()}
	_, s.cluster = rdb.(*redis.ClusterClient)
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.replicas > 0 {
		switch rdb.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, invalid("WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T: WAIT must follow the write on its connection", rdb)
		}
	}
	return s, nil
}

// observe reports a fenced write's result; deferred by each fenced method.
func (s *Store) observe(op string, errp *error) {
	if s != nil && s.obs != nil {
		s.obs.FencedWrite("redisfence", op, *errp)
	}
}

func (s *Store) usable() error {
	if s == nil || isNil(s.rdb) {
		return invalid("nil Store; use New")
	}
	return nil
}

// checkKey refuses a data key the Store cannot write for the resource whose mark is
// mark: an empty key, one of the Store's own, and, on a Cluster, one in another
// slot than the mark (a script may only touch keys of one slot).
func (s *Store) checkKey(resource, mark, key string) error {
	switch {
	case key == "":
		return invalid("empty key")
	case strings.HasPrefix(key, markPrefix):
		return invalid("key %q: keys beginning %q are the Store's own", key, markPrefix)
	case s.cluster && Slot(key) != Slot(mark):
		return invalid("key %q is in cluster slot %d, resource %q in slot %d: on a Redis Cluster a resource's keys must share its slot; name them with its hash tag, as in %q", key, Slot(key), resource, Slot(mark), "{"+hashTag(resource)+"}:"+key)
	}
	return nil
}

// parseToken reads a token the scripts returned (a decimal string).
func parseToken(v any) (fence.Token, error) {
	var n int64
	switch v := v.(type) {
	case string:
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			return 0, fmt.Errorf("%w: token %q", ErrBadMark, v)
		}
	case int64:
		n = v
	case nil:
		return 0, nil
	default:
		return 0, fmt.Errorf("%w: token of type %T", ErrBadMark, v)
	}
	return fence.Token(n), nil
}
