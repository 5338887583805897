package lockclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type state int

const (
	idle   state = iota // no session lease: granted by the next acquire
	live                // session lease granted and renewed
	closed              // Close called
)

// Client takes named locks in etcd under one session lease at a time. It is
// safe for concurrent use; a process normally has one for its whole life. It
// is not reentrant: a second Acquire of a name it holds waits for the first to
// be released, as another Client's would.
type Client struct {
	options
	cli         *clientv3.Client
	seq         atomic.Uint64 // makes every put's value unique, to recognise our own after an unknown outcome
	valuePrefix []byte        // see valuePrefix

	sess *session
	reg  *registry

	stop  chan struct{}  // closed by Close
	loops sync.WaitGroup // every goroutine of the Client (spawn); Close waits for them
	done  chan struct{}  // closed by Close

	closing  context.Context         // cancelled (cause ErrClosed) by Close first: every call derives from it (call)
	closeNow context.CancelCauseFunc // cancels closing
}

// New returns a Client that takes locks through cli. It does no I/O: the
// session lease is granted by the first acquire, under that call's context. It
// returns an error wrapping fence.ErrInvalidArgument for a nil cli or an
// unusable option, naming the option.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, invalid("New: nil etcd client")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	reg := newRegistry()
	c := &Client{options: o, cli: cli, sess: newSession(o.ttl, reg), reg: reg,
		stop: make(chan struct{}), done: make(chan struct{})}
	c.closing, c.closeNow = context.WithCancelCause(context.Background())
	host, _ := os.Hostname()
	pid := os.Getpid()
	var b [8]byte
	rand.Read(b[:])
	instance := hex.EncodeToString(b[:])
	if c.id == "" {
		c.id = fmt.Sprintf("%s-%d-%s", host, pid, instance[:12])
	}
	c.valuePrefix = valuePrefix(host, pid, c.id, instance)
	return c, nil
}

// ID returns the client ID stored with every lock this Client takes.
func (c *Client) ID() string { return c.id }

func (c *Client) key(name string) string { return c.prefix + name }

// Close releases every lock the Client holds, deleting their keys in one Txn
// conditioned on their tokens (watchers see them released), revokes its
// session lease (a second etcd write) and ends its goroutines; every held Lock
// ends with cause ErrClosed and every later call returns ErrClosed. Every call
// in flight (a wait, a Lead, a Watch, whose channel closes) ends with ErrClosed
// as soon as its etcd request is cancelled, without waiting on etcd; no
// goroutine of the Client outlives Close. Close is idempotent. If etcd cannot
// be reached within the TTL, Close returns that error; the lease expires by
// itself.
func (c *Client) Close() error {
	c.closeNow(ErrClosed)
	prev, lease, dels, locks, ok := c.sess.close()
	if !ok {
		return nil
	}
	for _, l := range locks {
		l.end(ErrClosed)
		for _, key := range l.keys {
			dels = append(dels, tokenDelete(key, l.token))
		}
	}
	close(c.stop)
	c.loops.Wait()
	close(c.done)
	if prev != live {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	if len(dels) > 0 {
		c.deleteBatch(ctx, uniqueKeys(dels), time.Now().Add(c.ttl)) // if it fails, the revoke deletes them
	}
	if _, err := c.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lockclient: close: revoke session lease (it expires within %v by itself): %w", c.ttl, err)
	}
	return nil
}

// uniqueKeys keeps the first delete of each key: etcd refuses a Txn that
// names a key twice.
func uniqueKeys(dels []pendingDelete) []pendingDelete {
	seen := make(map[string]bool, len(dels))
	return slices.DeleteFunc(dels, func(p pendingDelete) bool {
		dup := seen[p.key]
		seen[p.key] = true
		return dup
	})
}
