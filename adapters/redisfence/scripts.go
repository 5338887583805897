package redisfence

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A mark is a hash: its field token holds the resource's high-water token, and a
// field deleted:KEY per data key deleted through the Store (its tombstone) the
// deleting token.

// The scripts compare decimal tokens without leading zeros exactly (Lua's numbers
// are doubles, exact only to 2^53): by length, then bytewise. The comparison is
// written out inline, since a function made on every call costs server time.

// writeLua is every single-key fenced write: KEYS[1] the mark, KEYS[2] the data key,
// ARGV[1] the token, ARGV[2] the form (set, hset, del), the rest the form's
// arguments. It reads the mark and the key's tombstone in one HMGET (a mark of the
// wrong type fails here, before any write), refuses a lower token with {0, mark},
// writes the data (a data key of the wrong type fails here, with nothing written),
// clears or sets the tombstone, then raises the mark. It returns 1.
const writeLua = `
local t = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'token', 'deleted:' .. KEYS[2])
local m = f[1] or '0'
if #t < #m or (#t == #m and t < m) then return {0, m} end
local form = ARGV[2]
if form == 'set' then
	if ARGV[4] == '' then
		redis.call('SET', KEYS[2], ARGV[3])
	elseif ARGV[4] == 'keepttl' then
		redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL')
	else
		redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
	end
elseif form == 'hset' then
	redis.call('HSET', KEYS[2], unpack(ARGV, 3))
elseif form == 'del' then
	redis.call('DEL', KEYS[2])
	redis.call('HSET', KEYS[1], 'deleted:' .. KEYS[2], t)
end
if f[2] and form ~= 'del' then redis.call('HDEL', KEYS[1], 'deleted:' .. KEYS[2]) end
if #m < #t or (#m == #t and m < t) then redis.call('HSET', KEYS[1], 'token', t) end
return 1
`

// txLua is a fenced transaction: KEYS[1..n] the marks, sorted, then the data keys;
// ARGV[1] the token, ARGV[2] n, ARGV[3] the number of commands, then each command
// as its argument count and arguments. Every mark is checked before anything is
// written; a lower token is refused with {0, i, mark} (i the mark's index). Then
// the marks are raised, the data keys' tombstones cleared, and the commands run in
// order, each with redis.pcall, as EXEC runs a MULTI's: a command that fails does
// not stop the others. It returns {1, replies}.
const txLua = `
local t = ARGV[1]
local n = tonumber(ARGV[2])
local marks = {}
for i = 1, n do
	local m = redis.call('HGET', KEYS[i], 'token') or '0'
	if #t < #m or (#t == #m and t < m) then return {0, i, m} end
	marks[i] = m
end
for i = 1, n do
	local m = marks[i]
	if #m < #t or (#m == #t and m < t) then redis.call('HSET', KEYS[i], 'token', t) end
	if redis.call('HLEN', KEYS[i]) > 1 then
		for k = n + 1, #KEYS do redis.call('HDEL', KEYS[i], 'deleted:' .. KEYS[k]) end
	end
end
local out = {}
local p = 4
for c = 1, tonumber(ARGV[3]) do
	local argc = tonumber(ARGV[p])
	out[c] = redis.pcall(unpack(ARGV, p + 1, p + argc))
	p = p + argc + 1
end
return {1, out}
`

// readLua reads a data key with its resource's mark and tombstone, in one atomic
// step: KEYS[1] the mark, KEYS[2] the key, ARGV[1] "hash" for HGETALL, else GET.
// It returns {mark, value, deleting token or false}.
const readLua = `
local m = redis.call('HGET', KEYS[1], 'token') or '0'
local d = redis.call('HGET', KEYS[1], 'deleted:' .. KEYS[2])
local v
if ARGV[1] == 'hash' then v = redis.call('HGETALL', KEYS[2]) else v = redis.call('GET', KEYS[2]) end
return {m, v, d}
`

// script is a Lua script sent by its SHA1 (EVALSHA), and whole (EVAL) when the
// server does not have it yet (NOSCRIPT: after a restart, a failover, SCRIPT FLUSH).
type script struct {
	src, sha string
}

func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// noRetryCmd is a command go-redis must not send again once it may have been sent
// (go-redis resends a command whose connection broke, up to MaxRetries): a fenced
// write whose reply was lost is ErrCommitUnknown, never a second execution.
// Redirections (MOVED, ASK) and a refused connection are still followed, since the
// command did not run.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry makes go-redis send the command at most once.
func (noRetryCmd) NoRetry() bool { return true }

// cmd builds the EVALSHA (or, with whole, EVAL) of sc.
func (sc *script) cmd(ctx context.Context, whole bool, keys []string, args []any) noRetryCmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	if whole {
		a = append(a, "eval", sc.src)
	} else {
		a = append(a, "evalsha", sc.sha)
	}
	a = append(a, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return noRetryCmd{redis.NewCmd(ctx, append(a, args...)...)}
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || strings.HasPrefix(err.Error(), "NOSCRIPT"))
}

// waited is what WAIT said after a write: how many replicas acknowledged it, or
// why WAIT failed; n is -1 when the Store does not wait.
type waited struct {
	n   int64
	err error
}

// run sends sc once by its SHA1 and, on NOSCRIPT (the script did not run), once
// whole. When the Store waits for replicas it sends them on one connection and,
// when accepted says the reply is an accepted write, WAIT after it on that
// connection (WAIT counts the replicas that have that connection's writes). It
// returns the script's reply and what WAIT said.
func (s *Store) run(ctx context.Context, sc *script, keys []string, args []any, accepted func(any) bool) (any, waited, error) {
	none := waited{n: -1}
	if s.replicas == 0 {
		reply, err := eval(ctx, s.rdb, sc, keys, args)
		return reply, none, err
	}
	node, err := s.node(ctx, keys[0])
	if err != nil {
		return nil, none, notSent{err}
	}
	conn := node.(*redis.Client).Conn() // New accepts WithWaitReplicas only on such clients
	defer conn.Close()
	reply, err := eval(ctx, conn, sc, keys, args)
	if err != nil || !accepted(reply) {
		return reply, none, err
	}
	w := redis.NewIntCmd(ctx, "wait", s.replicas, s.waitTimeout.Milliseconds())
	_ = conn.Process(ctx, w)
	return reply, waited{n: w.Val(), err: w.Err()}, nil
}

// processor is what a script is sent through: a client, or one connection of it.
type processor interface {
	Process(context.Context, redis.Cmder) error
}

// eval sends sc by its SHA1 and, on NOSCRIPT, whole, through p.
func eval(ctx context.Context, p processor, sc *script, keys []string, args []any) (any, error) {
	c := sc.cmd(ctx, false, keys, args)
	err := p.Process(ctx, c)
	if isNoScript(err) {
		c = sc.cmd(ctx, true, keys, args)
		err = p.Process(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	return c.Val(), nil
}

// notSent is an error met before a script was sent.
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// check returns nil when WAIT was not asked for or counted enough replicas, else
// ErrNotReplicated saying how many did (or why WAIT failed).
func (w waited) check(s *Store) error {
	switch {
	case w.n < 0 && w.err == nil:
		return nil
	case w.err != nil:
		return fmt.Errorf("%w: WAIT %d after the write failed: %w", ErrNotReplicated, s.replicas, w.err)
	case w.n < int64(s.replicas):
		return fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, w.n, s.replicas, s.waitTimeout)
	}
	return nil
}

// node returns the client of the node serving key: on a Cluster its primary's,
// else the Store's own.
func (s *Store) node(ctx context.Context, key string) (redis.UniversalClient, error) {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return s.rdb, nil
}
