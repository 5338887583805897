package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The two invoices: Server 1 computed its total before it froze; Server 2, later,
// from newer usage. Whichever is stored at the end says who won.
const (
	staleTotal = 12000 // $120.00
	newTotal   = 13500 // $135.00
)

// orchestrate starts the servers the run needs and the two workers, drives the
// timeline, prints it, and returns nil only when the run showed what it claims.
func orchestrate(ctx context.Context, cfg config, out io.Writer) error {
	etcdWhere := "etcd at " + strings.Join(cfg.endpoints, ",")
	if len(cfg.endpoints) == 0 {
		e, err := startEtcd(ctx)
		if err != nil {
			return err
		}
		defer e.Close()
		cfg.endpoints = e.Endpoints()
		etcdWhere = "embedded etcd at " + cfg.endpoints[0]
	}
	if cfg.db.kind == "sqlite" {
		if cfg.db.dsn == "" {
			dir, err := os.MkdirTemp("", "gcpause-sqlite-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			cfg.db.dsn = filepath.Join(dir, "invoices.db")
		}
	}
	dbWhere := cfg.db.describe()
	if err := setupDB(ctx, cfg.db, cfg.resource); err != nil {
		return fmt.Errorf("%s: %w", cfg.db.kind, err)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()

	args := []string{"-db=" + cfg.db.kind, "-etcd=" + strings.Join(cfg.endpoints, ","),
		"-lease=" + cfg.lease.String(), "-resource=" + cfg.resource}
	if cfg.noFence {
		args = append(args, "-no-fence")
	}
	var s1, s2 *worker
	defer func() {
		// Every exit path ends both workers; a frozen one is resumed first so that it
		// can quit, and killed if it does not.
		for _, w := range []*worker{s1, s2} {
			if w != nil {
				w.stop(10 * time.Second)
			}
		}
	}()
	if s1, err = startWorker(ctx, "Server 1", args, cfg.db.dsn); err != nil {
		return err
	}
	if s2, err = startWorker(ctx, "Server 2", args, cfg.db.dsn); err != nil {
		return err
	}

	mode := "with fencing"
	if cfg.noFence {
		mode = "WITHOUT fencing (-no-fence)"
	}
	fmt.Fprintf(out, "GC-pause timeline, %s: lease %v, %s, %s\n", mode, cfg.lease, etcdWhere, dbWhere)
	fmt.Fprintf(out, "Server 1 and Server 2 are processes %d and %d; the freeze is SIGSTOP, the wake-up SIGCONT.\n\n",
		s1.cmd.Process.Pid, s2.cmd.Process.Pid)

	r, err := replay(ctx, cfg, cli, s1, s2, out)
	if err != nil {
		return err
	}
	// Both workers exit before the row is read, so it is what the database kept.
	errs := []error{s1.stop(10 * time.Second), s2.stop(10 * time.Second)}
	s1, s2 = nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping the workers: %w", err)
	}
	db, err := openInvoiceDB(ctx, cfg.db)
	if err != nil {
		return err
	}
	defer db.Close()
	if r.stored, r.found, err = db.Read(ctx, cfg.resource); err != nil {
		return fmt.Errorf("read the invoice row: %w", err)
	}
	r.summary(out, dbWhere)
	return r.verdict()
}

// replay drives the timeline. The steps keep the classic timeline's proportions of
// the lease (renew at 0.3, freeze at 0.4, Server 2 writes 0.1 after taking the lock
// and Server 1 wakes 0.4 after that); everything else is measured.
func replay(ctx context.Context, cfg config, cli *clientv3.Client, s1, s2 *worker, out io.Writer) (result, error) {
	L := cfg.lease
	r := result{noFence: cfg.noFence, resource: cfg.resource}
	t0 := time.Now()
	tl := newTimeline(out, t0)
	e, err := s1.do(ctx, command{Cmd: "acquire", Manual: true}, "acquired")
	if err != nil {
		return r, err
	}
	r.s1Token = e.Token
	tl.add(e.time(), "Server 1 takes %s: token %d, lease to %s", cfg.resource, e.Token, tl.leaseTo(e))

	// Watch Server 1's key from its grant on, to see the moment etcd deletes it.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := cli.Watch(wctx, lockPrefix+cfg.resource, clientv3.WithRev(e.Token+1), clientv3.WithFilterPut())

	sleepUntil(ctx, t0.Add(L*3/10))
	if e, err = s1.do(ctx, command{Cmd: "renew"}, "renewed"); err != nil {
		return r, err
	}
	tl.add(e.time(), "Server 1 renews: lease to %s", tl.leaseTo(e))
	if e, err = s1.do(ctx, command{Cmd: "prepare", TotalCents: staleTotal}, "prepared"); err != nil {
		return r, err
	}
	r.s1Wanted = invoice{Account: cfg.resource, TotalCents: staleTotal, WrittenBy: s1.name, Token: r.s1Token}
	tl.add(e.time(), "Server 1 has its invoice ready (%s); writing it is its next step", dollars(staleTotal))

	sleepUntil(ctx, t0.Add(L*4/10))
	if err := s1.freeze(ctx); err != nil {
		return r, err
	}
	tl.add(time.Now(), "Server 1 freezes (garbage collection): SIGSTOP, the whole process stopped")

	if e, err = s2.do(ctx, command{Cmd: "try"}, "held"); err != nil {
		return r, err
	}
	tl.add(e.time(), "Server 2 asks for %s: held by %s with token %d, so it waits", cfg.resource, e.Holder, e.Token)
	if err := s2.send(command{Cmd: "acquire"}); err != nil {
		return r, err
	}

	// etcd expires the lease once a whole lease passes without a keepalive from the
	// frozen process, and deletes the key with it.
	deleteRev, at, err := awaitDelete(ctx, watch, 2*L+stepTimeout)
	if err != nil {
		return r, err
	}
	tl.add(at, "Server 1's lease runs out: etcd deletes its key (revision %d)", deleteRev)

	if e, err = s2.await(ctx, "acquired", stepTimeout); err != nil {
		return r, err
	}
	r.s2Token = e.Token
	if r.expired, err = tookAtExpiry(ctx, cli, lockPrefix+cfg.resource, r.s2Token, deleteRev); err != nil {
		return r, err
	}
	tl.add(e.time(), "Server 2 takes %s: token %d (its place in line), lease to %s", cfg.resource, e.Token, tl.leaseTo(e))

	sleepUntil(ctx, e.time().Add(L/10))
	if e, err = s2.do(ctx, command{Cmd: "prepare", TotalCents: newTotal}, "prepared"); err != nil {
		return r, err
	}
	r.s2Wanted = invoice{Account: cfg.resource, TotalCents: newTotal, WrittenBy: s2.name, Token: r.s2Token}
	if r.s2Write, err = s2.do(ctx, command{Cmd: "write"}, "wrote"); err != nil {
		return r, err
	}
	tl.add(r.s2Write.time(), "Server 2 writes the invoice with token %d%s: %s", r.s2Token, unfenced(cfg), outcome(r.s2Write))

	// Server 1 resumes mid-job: its write command waits in the pipe while it is
	// frozen, so the first thing it does on waking is the write it had prepared.
	sleepUntil(ctx, r.s2Write.time().Add(L*4/10))
	if err := s1.send(command{Cmd: "write", Unwatched: true}); err != nil {
		return r, err
	}
	woke := time.Now()
	if err := s1.thaw(); err != nil {
		return r, err
	}
	if r.s1Write, err = s1.await(ctx, "wrote", stepTimeout); err != nil {
		return r, err
	}
	what := outcome(r.s1Write)
	if cfg.noFence && r.s1Write.Outcome == "accepted" {
		what += ", overwriting Server 2's invoice"
	}
	rows := []row{{r.s1Write.time(), fmt.Sprintf("Server 1 wakes up (SIGCONT), writes with token %d%s: %s",
		r.s1Token, unfenced(cfg), what)}}
	// Report when Server 1's own lock client noticed the loss, if it does within a
	// lease; the verdict does not depend on it.
	select {
	case e := <-s1.lost:
		rows = append(rows, row{e.time(), fmt.Sprintf("Server 1's lock client notices its lock is lost (%v after SIGCONT)", e.time().Sub(woke).Round(10*time.Microsecond))})
	case <-time.After(L):
		rows = append(rows, row{time.Now(), "Server 1's lock client has still not noticed its lock is lost"})
	}
	tl.addSorted(rows...)

	if _, err := s2.do(ctx, command{Cmd: "release"}, "released"); err != nil {
		return r, err
	}
	return r, nil
}

// awaitDelete returns the revision and the time at which the watched key was deleted.
// tookAtExpiry reports whether Server 2 could take the lock only once etcd
// deleted Server 1's key at deleteRev: it asked later (a token above it), or
// its place was in the lock's line behind that key just before.
func tookAtExpiry(ctx context.Context, cli *clientv3.Client, key string, s2Token, deleteRev int64) (bool, error) {
	if s2Token > deleteRev {
		return true, nil
	}
	resp, err := cli.Get(ctx, key, clientv3.WithRange(key+"\x01"), clientv3.WithRev(deleteRev-1), clientv3.WithKeysOnly())
	if err != nil {
		return false, fmt.Errorf("etcd: reading the lock's line before the expiry: %w", err)
	}
	waiting, ahead := false, false
	for _, kv := range resp.Kvs {
		waiting = waiting || kv.CreateRevision == s2Token
		ahead = ahead || kv.CreateRevision < s2Token
	}
	return waiting && ahead, nil
}

func awaitDelete(ctx context.Context, watch clientv3.WatchChan, within time.Duration) (int64, time.Time, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case resp, ok := <-watch:
			if !ok {
				return 0, time.Time{}, errors.New("etcd: the watch on Server 1's key ended")
			}
			if err := resp.Err(); err != nil {
				return 0, time.Time{}, fmt.Errorf("etcd: watching Server 1's key: %w", err)
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					return ev.Kv.ModRevision, time.Now(), nil
				}
			}
		case <-timer.C:
			return 0, time.Time{}, fmt.Errorf("the lease of Server 1 did not run out within %v of its freeze", within)
		case <-ctx.Done():
			return 0, time.Time{}, context.Cause(ctx)
		}
	}
}

// outcome describes a write event for the table.
func outcome(e event) string {
	switch e.Outcome {
	case "refused":
		return fmt.Sprintf("refused (the database has seen token %d)", e.Seen)
	case "accepted":
		return "accepted"
	}
	return fmt.Sprintf("%s (%s)", e.Outcome, e.Err)
}

func unfenced(cfg config) string {
	if cfg.noFence {
		return " and no fencing"
	}
	return ""
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-time.After(time.Until(t)):
	case <-ctx.Done():
	}
}
