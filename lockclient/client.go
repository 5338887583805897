package lockclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type state int

const (
	idle   state = iota // no session lease yet: granted by the first acquire
	live                // session lease granted and renewed
	lost                // session deadline passed without a confirmed renewal
	closed              // Close called
)

// Client takes named locks in etcd under one session lease. It is safe for
// concurrent use; a process normally has one. Locks of one Client exclude each
// other as locks of different Clients do (a Client is not reentrant: a second
// Acquire of a name it holds waits for the first to be released).
type Client struct {
	cli         *clientv3.Client
	ttl         time.Duration
	interval    time.Duration
	prefix      string
	id          string
	host        string
	pid         int
	seq         atomic.Uint64 // makes every put's value unique, to recognise our own after an unknown outcome
	valuePrefix []byte        // see valuePrefix
	log         *slog.Logger  // nil: silent
	obs         Observer      // nil: nothing reported

	grantSem chan struct{} // one session grant at a time
	stop     chan struct{} // closed by Close
	poke     chan struct{} // wakes the loop: an earlier manual deadline, a new pending delete
	loopDone chan struct{} // closed when the loop returns
	done     chan struct{} // closed when the session is lost or the client closed
	doneOnce sync.Once

	mu          sync.Mutex
	state       state
	lease       clientv3.LeaseID
	deadline    time.Time // conservative session deadline: renewal send time + TTL returned
	loopStarted bool
	locks       map[string]*Lock // held locks by name
	manual      lockHeap         // manual-renewal locks by deadline
	pending     []pendingDelete  // deletes to retry until they reach etcd
}

// New returns a Client that takes locks through cli. It does no I/O: the
// session lease is granted by the first Acquire or TryAcquire, under that call's
// context. Options that are unusable return an error matching ErrInvalidOption:
// WithTTL under MinTTL or not whole seconds, WithRenewInterval not under the TTL,
// a malformed WithPrefix or WithIdentity. A nil cli is refused as well.
func New(cli *clientv3.Client, opts ...Option) (*Client, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: nil etcd client", ErrInvalidOption)
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
		prefix:   o.prefix,
		id:       o.identity,
		log:      o.logger,
		obs:      o.observer,
		host:     host,
		pid:      os.Getpid(),
		grantSem: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		poke:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		done:     make(chan struct{}),
		locks:    make(map[string]*Lock),
	}
	if c.id == "" {
		var b [6]byte
		rand.Read(b[:])
		c.id = fmt.Sprintf("%s-%d-%s", host, c.pid, hex.EncodeToString(b[:]))
	}
	c.valuePrefix = valuePrefix(c.host, c.pid, c.id)
	return c, nil
}

// ID returns the client ID stored with every lock this Client takes.
func (c *Client) ID() string { return c.id }

// Done is closed when the Client's session is lost (its lease ran out without a
// confirmed renewal; every lock it held is lost with it) or the Client is closed.
// A lost Client grants no more locks: make a new one.
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) closeDone() { c.doneOnce.Do(func() { close(c.done) }) }

func (c *Client) key(name string) string { return c.prefix + name }

// stateErr is the error for a client that cannot grant locks any more.
func stateErr(s state) error {
	if s == closed {
		return ErrClosed
	}
	return ErrSessionLost
}

// session returns the live session lease, granting it on first use. ctx governs
// the grant.
func (c *Client) session(ctx context.Context) (clientv3.LeaseID, error) {
	for {
		c.mu.Lock()
		st, id := c.state, c.lease
		c.mu.Unlock()
		switch st {
		case live:
			return id, nil
		case lost, closed:
			return 0, stateErr(st)
		}
		select {
		case c.grantSem <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-c.done:
			continue
		}
		err := c.grant(ctx)
		<-c.grantSem
		if err != nil {
			return 0, err
		}
	}
}

func (c *Client) grant(ctx context.Context) error {
	c.mu.Lock()
	st := c.state
	c.mu.Unlock()
	if st != idle {
		return nil // granted (or ended) while this caller waited
	}
	sent := time.Now()
	resp, err := c.cli.Grant(ctx, int64(c.ttl/time.Second))
	if err != nil {
		return fmt.Errorf("lockclient: grant session lease: %w", c.denied(err))
	}
	c.mu.Lock()
	if c.state != idle { // closed meanwhile
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), c.ttl)
		defer cancel()
		c.cli.Revoke(rctx, resp.ID)
		return ErrClosed
	}
	c.state = live
	c.lease = resp.ID
	c.deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
	c.loopStarted = true
	c.mu.Unlock()
	go c.loop()
	return nil
}

// Close releases every lock the Client holds by revoking its session lease (one
// etcd write that deletes all their keys), ends the renewal goroutine, and closes
// Done. Every held Lock's Done closes with context cause ErrClosed. Close is
// idempotent. If etcd cannot be reached within the TTL, Close returns that error;
// the lease then expires by itself within the TTL.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.state == closed {
		c.mu.Unlock()
		return nil
	}
	prev, lease, started := c.state, c.lease, c.loopStarted
	c.state = closed
	locks := c.takeLocksLocked()
	c.mu.Unlock()

	for _, l := range locks {
		l.end(EndClosed, ErrClosed)
	}
	close(c.stop)
	if started {
		<-c.loopDone
	}
	c.closeDone()
	if prev != live {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.ttl)
	defer cancel()
	if _, err := c.cli.Revoke(ctx, lease); err != nil {
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

// loseSession makes the session loss final: every lock's Done closes with a
// *fence.LostError as its context cause, and the Client's Done closes.
func (c *Client) loseSession(why string) {
	c.mu.Lock()
	if c.state != live {
		c.mu.Unlock()
		return
	}
	c.state = lost
	lease := c.lease
	locks := c.takeLocksLocked()
	c.mu.Unlock()
	c.sessionLost(lease, why)
	for _, l := range locks {
		l.lose(EndLeaseExpired)
	}
	c.closeDone()
}

// Release releases the lock name if its key still carries token, for callers
// that kept only the token (the Lock's own Release does the same). It is one etcd
// Txn conditioned on the key's create revision, so it can never delete a
// successor's key. ctx governs the Txn.
//
// It returns a *NotHeldError (ErrNotHeld) when the key is gone or carries another
// token, ErrInvalidName for a bad name, a *fence.InvalidTokenError for a token
// <= 0, ErrClosed on a closed Client, or etcd's error.
func (c *Client) Release(ctx context.Context, name string, token fence.Token) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if err := checkToken(name, token); err != nil {
		return err
	}
	c.mu.Lock()
	st := c.state
	l := c.locks[name]
	c.mu.Unlock()
	if st == closed {
		return ErrClosed
	}
	if l != nil && l.token == token {
		return l.Release(ctx)
	}
	return c.deleteKey(ctx, name, token)
}

// deleteKey is the release Txn: delete the key only if it carries token.
func (c *Client) deleteKey(ctx context.Context, name string, token fence.Token) error {
	key := c.key(name)
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", int64(token))).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("lockclient: release %q (token %d): %w", name, token, c.denied(err))
	}
	if !resp.Succeeded {
		e := &NotHeldError{Name: name, Token: token}
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			e.Current = fence.Token(kvs[0].CreateRevision)
		}
		return e
	}
	return nil
}
