package scenario

import (
	"context"
	"fmt"
	"time"
)

// StoreServer is the database server a scenario may crash, restart and cut
// workers off from: a *pgtest.Server satisfies it. Config.Setup must take the
// workers' DSN from the same server.
type StoreServer interface {
	// Addr is the host:port the server listens on.
	Addr() (string, error)
	// Crash kills the server as a machine's crash would.
	Crash() error
	// Restart starts it again on its data and returns once it answers.
	Restart(ctx context.Context) error
}

// Names of the timelines of the servers a run started, in Events.
const (
	etcdTimeline  = "etcd"
	storeTimeline = "store"
)

// restartTimeout bounds the restart of a crashed server.
const restartTimeout = 2 * time.Minute

// CrashStore crashes Config.StoreServer (every connection breaks, a transaction
// not committed is gone) and restarts it on its data: with Until, once the point
// is reached; by default at once, the step returning when the store answers again
// (so a worker held at the step's When point finds it back).
func CrashStore() *Step { return &Step{fault: crashStore{}} }

// CutOffStore cuts the worker's connections to Config.StoreServer, closing every
// open one and leaving new ones unanswered, until its Until point or, by default,
// for one lease (Config.TTL) or until the worker finishes. The worker must reach
// the store through its own proxy: build its DSN with Worker.StoreDSN. A new
// connection waits as across a partition, holding the worker's lock: bound the
// job's store calls (a context deadline, connect_timeout) when another worker's
// Until point needs that lock.
func CutOffStore(worker string) *Step { return &Step{fault: cutOffStore{worker}} }

type crashStore struct{}

func (crashStore) String() string { return "CrashStore()" }

func (crashStore) check(cfg Config, _ map[string]bool, _ *Step) string {
	if cfg.StoreServer == nil {
		return "Config.StoreServer is nil, so the kit has no store server to crash: set it to the server Config.Setup takes its DSN from (a *pgtest.Server)"
	}
	return ""
}

func (crashStore) act(r *run, s *Step) (func(), error) {
	r.mu.Lock()
	if r.storeDown {
		r.mu.Unlock()
		return nil, fmt.Errorf("the store is down already: an earlier CrashStore has not restarted it yet (its Until point)")
	}
	r.storeDown = true
	r.mu.Unlock()
	if err := r.cfg.StoreServer.Crash(); err != nil {
		r.mu.Lock()
		r.storeDown = false
		r.mu.Unlock()
		return nil, fmt.Errorf("Config.StoreServer.Crash: %w (a server the test did not start itself cannot be crashed)", err)
	}
	at := time.Now()
	r.event(storeTimeline, "crashed")
	restart := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
		defer cancel()
		if err := r.cfg.StoreServer.Restart(ctx); err != nil {
			return fmt.Errorf("Config.StoreServer.Restart: %w", err)
		}
		r.mu.Lock()
		r.storeDown = false
		r.eventLocked(storeTimeline, "restarted (down %v)", time.Since(at).Round(time.Millisecond))
		r.mu.Unlock()
		return nil
	}
	if s.until == nil {
		return nil, restart()
	}
	return func() {
		if err := restart(); err != nil {
			r.t.Errorf("scenario: %s: %v", s, err)
		}
	}, nil
}

func (crashStore) end(*run) {}

type cutOffStore struct{ worker string }

func (f cutOffStore) String() string { return fmt.Sprintf("CutOffStore(%q)", f.worker) }

func (f cutOffStore) check(cfg Config, known map[string]bool, s *Step) string {
	if cfg.StoreServer == nil {
		return "Config.StoreServer is nil, so the kit runs no proxy to the store to cut: set it to the server Config.Setup takes its DSN from (a *pgtest.Server), and build each worker's DSN with Worker.StoreDSN"
	}
	return checkWorker("CutOffStore", f.worker, true, known, s)
}

func (f cutOffStore) act(r *run, _ *Step) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.liveLocked(f.worker)
	if err != nil {
		return nil, err
	}
	p.store.setCut(true)
	p.cut = true
	r.eventLocked(p.name, "cut off from the store")
	return r.whileLive(p, func() {
		p.store.setCut(false)
		r.eventLocked(p.name, "reconnected to the store")
	}), nil
}

// end waits one lease, or until the worker finishes.
func (f cutOffStore) end(r *run) {
	p := r.procs[f.worker]
	timer := time.NewTimer(r.cfg.TTL)
	defer timer.Stop()
	for {
		r.mu.Lock()
		exited, ch := p.exited, r.changed
		r.mu.Unlock()
		if exited {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-r.closed:
			return
		}
	}
}
