package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/sqlite"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/migrations"
)

// lockName is the one lock both schedulers campaign for.
const lockName = "scheduler"

// jobWork is how long a job takes between its start and its write: the
// report it builds. A freeze that falls inside it is what makes the job write
// late, with its old term's token.
const jobWork = 300 * time.Millisecond

// event is one line a scheduler prints for the orchestrator.
type event struct {
	At      int64  `json:"at"` // Unix nanoseconds
	Event   string `json:"event"`
	Token   int64  `json:"token,omitempty"`
	Job     int    `json:"job,omitempty"`
	Outcome string `json:"outcome,omitempty"` // job: stored, refused, failed
	Seen    int64  `json:"seen,omitempty"`    // refused: the token the database has
	Leader  string `json:"leader,omitempty"`  // follow: the leader's address (its WithValue)
	Cause   string `json:"cause,omitempty"`   // ended
	Err     string `json:"err,omitempty"`
}

// scheduler is one scheduler process: it leads the schedule while it holds a
// term of the lock and follows the leader otherwise.
type scheduler struct {
	name, addr string
	lease      time.Duration
	every      time.Duration
	locks      *lockclient.Client
	store      *sqlfence.Store
	db         *sql.DB
	mu         sync.Mutex
	enc        *json.Encoder
}

func (s *scheduler) emit(e event) {
	e.At = time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enc.Encode(e)
}

// runScheduler is the -role=scheduler process. It ends when its stdin closes
// (the orchestrator is gone) or ctx ends.
func runScheduler(ctx context.Context, name, addr string, endpoints []string, dbPath string, lease, every time.Duration, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	locks, err := lockclient.New(cli, lockclient.WithTTL(lease), lockclient.WithIdentity(name))
	if err != nil {
		return err
	}
	defer locks.Close()
	db, err := sqlite.Open(dbPath)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlfence.New(db, migrations.SQLite)
	if err != nil {
		return err
	}
	s := &scheduler{name: name, addr: addr, lease: lease, every: every, locks: locks, store: store, db: db, enc: json.NewEncoder(stdout)}
	events, err := locks.Watch(ctx, lockName)
	if err != nil {
		return err
	}
	go s.follow(events)
	err = locks.Lead(ctx, lockName, s.lead, lockclient.WithValue([]byte(addr)))
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// follow reports who leads, as the lock's watch tells it.
func (s *scheduler) follow(events <-chan lockclient.Event) {
	for ev := range events {
		if ev.Type == lockclient.EventTaken && ev.Holder.ClientID != s.name {
			s.emit(event{Event: "follow", Token: int64(ev.Holder.Token), Leader: string(ev.Holder.Value)})
		}
	}
}

// lead runs the schedule for one term: a job every s.every until the term ends.
func (s *scheduler) lead(term *lockclient.Lock) error {
	s.emit(event{Event: "lead", Token: int64(term.Token())})
	next, err := s.nextJob()
	if err != nil {
		return err
	}
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		select {
		case <-term.Done():
			s.emit(event{Event: "ended", Token: int64(term.Token()), Cause: context.Cause(term.Context()).Error()})
			return nil
		case <-tick.C:
		}
		s.emit(event{Event: "start", Token: int64(term.Token()), Job: next})
		// A dispatched job carries only its term's token, as a job handed to a
		// worker pool or another service would: it does not know whether the
		// term is still on. The database does.
		s.run(fence.NewGrant(term.Resource(), term.Token()), next)
		next++
	}
}

// run builds job n's report and stores it, fenced by g.
func (s *scheduler) run(g fence.Grant, n int) {
	time.Sleep(jobWork)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := fence.Exec(ctx, s.store, g, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO scheduler_jobs (job, run_by, fence_token) VALUES (?, ?, ?)`, n, s.name, int64(g.Token()))
		return err
	})
	e := event{Event: "job", Token: int64(g.Token()), Job: n, Outcome: "stored"}
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale):
		e.Outcome, e.Seen = "refused", int64(stale.Seen)
	case err != nil:
		e.Outcome, e.Err = "failed", err.Error()
	}
	s.emit(e)
}

// nextJob is the job after the last one stored: a new leader goes on with the
// schedule where the last one left it.
func (s *scheduler) nextJob() (int, error) {
	var n sql.NullInt64
	err := s.db.QueryRow(`SELECT MAX(job) FROM scheduler_jobs`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("next job: %w", err)
	}
	return int(n.Int64) + 1, nil
}

// createJobs is the example's table: one row per job run, with the token of
// the term that stored it.
const createJobs = `CREATE TABLE IF NOT EXISTS scheduler_jobs (
    job         INTEGER NOT NULL PRIMARY KEY,
    run_by      TEXT NOT NULL,
    fence_token BIGINT NOT NULL
)`
