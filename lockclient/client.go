package lockclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
// safe for concurrent use; a process normally has one for its whole life: when
// its session is lost, the locks of that session end and the next Acquire
// starts a new session. Locks of one Client exclude each other as locks of
// different Clients do (a Client is not reentrant: a second Acquire of a name it
// holds waits for the first to be released).
type Client struct {
	cli         *clientv3.Client
	ttl         time.Duration
	interval    time.Duration // renewal interval while a lock is held
	idle        time.Duration // renewal interval while none is
	prefix      string
	id          string
	host        string
	pid         int
	seq         atomic.Uint64 // makes every put's value unique, to recognise our own after an unknown outcome
	valuePrefix []byte        // see valuePrefix
	log         *slog.Logger  // nil: silent
	obs         Observer      // nil: nothing reported

	grantSem chan struct{}  // one session grant at a time
	stop     chan struct{}  // closed by Close
	poke     chan struct{}  // wakes the loop: an earlier manual deadline, a new pending delete
	loops    sync.WaitGroup // the running session's goroutines
	done     chan struct{}  // closed by Close

	mu        sync.Mutex
	state     state
	lease     clientv3.LeaseID
	deadline  time.Time        // conservative session deadline: renewal send time + TTL returned
	ended     chan struct{}    // closed when the live session is lost
	failures  int              // sessions lost or grants failed since a session was last renewed
	notBefore time.Time        // no new session before this: the backoff after a loss
	locks     map[string]*Lock // held locks by name
	manual    lockHeap         // manual-renewal locks by deadline
	pending   []pendingDelete  // deletes to retry until they reach etcd
}

// New returns a Client that takes locks through cli. It does no I/O: the
// session lease is granted by the first Acquire or TryAcquire, under that call's
// context. It returns an error wrapping fence.ErrInvalidArgument, naming the
// option, for an unusable option (WithTTL under MinTTL or not whole seconds,
// WithRenewInterval not under the TTL, a malformed WithPrefix or WithIdentity)
// and for a nil cli.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, invalid("New: nil etcd client")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	c := &Client{
		cli:      cli,
		ttl:      o.ttl,
		interval: o.interval,
		idle:     o.idle,
		prefix:   o.prefix,
		id:       o.identity,
		log:      o.logger,
		obs:      o.observer,
		host:     host,
		pid:      os.Getpid(),
		grantSem: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		poke:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		locks:    make(map[string]*Lock),
	}
	var b [8]byte
	rand.Read(b[:])
	instance := hex.EncodeToString(b[:])
	if c.id == "" {
		c.id = fmt.Sprintf("%s-%d-%s", host, c.pid, instance[:12])
	}
	c.valuePrefix = valuePrefix(c.host, c.pid, c.id, instance)
	return c, nil
}

// ID returns the client ID stored with every lock this Client takes.
func (c *Client) ID() string { return c.id }

func (c *Client) key(name string) string { return c.prefix + name }

// Close releases every lock the Client holds by revoking its session lease (one
// etcd write that deletes all their keys) and ends the renewal goroutine; every
// later call returns ErrClosed. Every held Lock's Done closes with context cause
// ErrClosed. Close is idempotent. If etcd cannot be reached within the TTL, Close
// returns that error; the lease then expires by itself within the TTL.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.state == closed {
		c.mu.Unlock()
		return nil
	}
	prev, lease := c.state, c.lease
	c.state = closed
	locks := c.takeLocksLocked()
	c.mu.Unlock()

	for _, l := range locks {
		l.end(ErrClosed)
	}
	close(c.stop)
	c.loops.Wait()
	close(c.done)
	if prev != live {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	if _, err := c.cli.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("lockclient: close: revoke session lease (it expires within %v by itself): %w", c.ttl, err)
	}
	return nil
}

// takeLocksLocked empties the client's lock registry and returns what it held.
func (c *Client) takeLocksLocked() []*Lock {
	locks := make([]*Lock, 0, len(c.locks))
	for _, l := range c.locks {
		locks = append(locks, l)
	}
	clear(c.locks)
	c.manual = nil
	c.pending = nil
	return locks
}
