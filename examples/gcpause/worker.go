package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// lockPrefix keeps the example's locks apart from an application's on a shared
// etcd cluster.
const lockPrefix = "/fencegate/examples/gcpause/"

// server is one worker process: Server 1 or Server 2 of the timeline. It does what
// the orchestrator's commands say, one at a time, and reports each step as an event.
// Nothing in it sleeps or pauses: the freeze is done to it from outside.
type server struct {
	name    string
	cfg     config
	locks   *lockclient.Client
	db      invoiceDB
	lock    *lockclient.Lock
	pending *invoice      // the invoice prepared and not yet written
	unwatch chan struct{} // closed to stop reporting the lock's loss (on release)

	mu  sync.Mutex // serialises events from the command loop and the loss watcher
	enc *json.Encoder
}

// serve runs a worker until the quit command, the end of its input or ctx.
func serve(ctx context.Context, name string, cfg config, in io.Reader, out io.Writer) error {
	if name == "" || len(cfg.endpoints) == 0 {
		return errors.New("worker: -name and -etcd are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{name: name, cfg: cfg, enc: json.NewEncoder(out)}

	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.endpoints,
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return fmt.Errorf("worker: etcd: %w", err)
	}
	defer cli.Close()
	// One session lease per process, with the lease of the timeline: a frozen process
	// stops its keepalives and etcd expires the lease, which deletes the lock's key.
	s.locks, err = lockclient.New(cli, lockclient.WithTTL(cfg.lease), lockclient.WithIdentity(name), lockclient.WithPrefix(lockPrefix))
	if err != nil {
		return fmt.Errorf("worker: lock client: %w", err)
	}
	defer s.locks.Close()
	if s.db, err = openInvoiceDB(ctx, cfg.db); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer s.db.Close()

	// Commands are read ahead on their own goroutine so that the end of the input
	// (the orchestrator has gone) cancels a command that blocks, such as an Acquire.
	cmds := make(chan command)
	go func() {
		defer cancel()
		defer close(cmds)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			var c command
			if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
				c = command{Cmd: "unreadable: " + sc.Text()}
			}
			if c.Cmd == "quit" {
				cancel()  // ends a command still blocked, such as Server 2's Acquire
				cmds <- c // the loop always comes back for the next command
				return
			}
			select {
			case cmds <- c:
			case <-ctx.Done():
				return
			}
		}
	}()

	s.emit(event{Event: "ready"})
	for c := range cmds {
		if c.Cmd == "quit" {
			return nil
		}
		if err := s.handle(ctx, c); err != nil {
			s.emit(event{Event: "error", Err: fmt.Sprintf("%s: %v", c.Cmd, err)})
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("worker: %w", context.Cause(ctx))
	}
	return errors.New("worker: input ended without quit")
}

// handle runs one command and reports its event; an error is reported by serve.
func (s *server) handle(ctx context.Context, c command) error {
	switch c.Cmd {
	case "acquire":
		if s.lock != nil {
			return fmt.Errorf("already holds %s with token %d", s.lock.Resource(), s.lock.Token())
		}
		// An automatically renewed lock lives as long as the session, whose TTL is the
		// lease.
		var opts []lockclient.LockOption
		if c.Manual {
			// The lock lives for one lease from each Renew, as in the timeline. The
			// session lease under it is kept alive by the client every third of its TTL
			// while the process runs; a frozen process keeps neither alive.
			opts = append(opts, lockclient.WithManualRenewal(s.cfg.lease))
		}
		lock, err := s.locks.Acquire(ctx, s.cfg.resource, opts...)
		if err != nil {
			return err
		}
		s.lock, s.unwatch = lock, make(chan struct{})
		go s.watchLoss(lock, s.unwatch)
		s.emit(event{Event: "acquired", Token: int64(lock.Token()), Lease: s.cfg.lease.Milliseconds()})
	case "try":
		lock, err := s.locks.TryAcquire(ctx, s.cfg.resource)
		var held *lockclient.HeldError
		switch {
		case errors.As(err, &held):
			s.emit(event{Event: "held", Holder: held.Holder.ClientID, Token: int64(held.Token)})
		case err != nil:
			return err
		default:
			lock.Release(ctx)
			return fmt.Errorf("%s was free, though the timeline has it held", s.cfg.resource)
		}
	case "renew":
		if s.lock == nil {
			return errors.New("no lock to renew")
		}
		// A manually renewed lock's lease restarts when Renew is sent, once etcd
		// confirms the key still carries the lock's token.
		sent := time.Now()
		if err := s.lock.Renew(ctx); err != nil {
			return err
		}
		s.emit(event{Event: "renewed", At: sent.UnixNano(), Token: int64(s.lock.Token()), Lease: s.cfg.lease.Milliseconds()})
	case "prepare":
		if s.lock == nil {
			return errors.New("no lock to prepare a write under")
		}
		s.pending = &invoice{Account: s.cfg.resource, TotalCents: c.TotalCents, WrittenBy: s.name, Token: int64(s.lock.Token())}
		s.emit(event{Event: "prepared", Token: int64(s.lock.Token())})
	case "write":
		if s.pending == nil || s.lock == nil {
			return errors.New("no invoice prepared under a lock")
		}
		s.emit(s.write(ctx, c.Unwatched))
	case "release":
		if s.lock == nil {
			return errors.New("no lock to release")
		}
		close(s.unwatch)
		err := s.lock.Release(ctx)
		s.lock, s.pending = nil, nil
		if err != nil {
			return err
		}
		s.emit(event{Event: "released"})
	default:
		return fmt.Errorf("unknown command %q", c.Cmd)
	}
	return nil
}

// write stores the prepared invoice and reports the outcome.
func (s *server) write(ctx context.Context, unwatched bool) event {
	inv := *s.pending
	s.pending = nil
	e := event{Event: "wrote", Token: inv.Token}
	select {
	case <-s.lock.Done():
		e.Lost = true
	default:
	}

	var err error
	if s.cfg.noFence {
		err = s.db.WritePlain(ctx, inv)
	} else {
		// The lock is the grant an application presents: fence.Exec refuses a grant
		// whose Done channel is closed before any I/O (fence.ErrLost). Server 1 wakes
		// with its loss possibly already noticed by its lock client, but in general a
		// paused holder may wake and write before its client notices anything. A bare
		// grant stands for that holder: it shows that the database, the last line of
		// defence, refuses the stale token whether or not the holder knows it is stale.
		var g fence.Grant = s.lock
		if unwatched {
			g = fence.NewGrant(s.lock.Resource(), s.lock.Token())
		}
		err = s.db.WriteFenced(ctx, g, inv)
	}

	var stale *fence.StaleError
	switch {
	case err == nil:
		e.Outcome = "accepted"
	case errors.As(err, &stale):
		e.Outcome = "refused"
		e.Presented, e.Seen = int64(stale.Presented), int64(stale.Seen)
		e.Err = err.Error()
	default:
		e.Outcome = "failed"
		e.Err = err.Error()
	}
	return e
}

// watchLoss reports the moment the lock client notices the lock is lost.
func (s *server) watchLoss(lock *lockclient.Lock, stop <-chan struct{}) {
	select {
	case <-lock.Done():
		s.emit(event{Event: "lost", Token: int64(lock.Token())})
	case <-stop:
	}
}

// emit writes one event line, stamped now unless it carries a time.
func (s *server) emit(e event) {
	if e.At == 0 {
		e.At = time.Now().UnixNano()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enc.Encode(e)
}
