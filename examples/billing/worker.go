package main

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// event is one line of the worker's log. A "commit" line is an acknowledged write:
// the transaction committed, so the database must hold it.
type event struct {
	Time    time.Time `json:"time"`
	Worker  string    `json:"worker"`
	Event   string    `json:"event"`
	Account string    `json:"account,omitempty"`
	Token   int64     `json:"token,omitempty"`
	Value   int64     `json:"value,omitempty"`
	Seen    int64     `json:"seen,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// eventLog writes events as JSON lines, one Write per line.
type eventLog struct {
	mu     sync.Mutex
	w      io.Writer
	worker string
}

func newLog(w io.Writer, worker string) *eventLog { return &eventLog{w: w, worker: worker} }

func (l *eventLog) log(ev event) {
	ev.Time, ev.Worker = time.Now().UTC(), l.worker
	b, _ := json.Marshal(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}

type worker struct {
	cfg config
	log *eventLog
	rng *rand.Rand
}

func newWorker(cfg config, log *eventLog) *worker {
	h := fnv.New64a()
	h.Write([]byte(cfg.id))
	return &worker{cfg: cfg, log: log, rng: rand.New(rand.NewPCG(cfg.seed, h.Sum64()))}
}

// run does jobs until ctx ends (SIGTERM) or cfg.jobs are done.
func (w *worker) run(ctx context.Context) error {
	w.log.log(event{Event: "start", Reason: w.mode()})
	defer w.log.log(event{Event: "stop"})
	db, err := openStore(ctx, w.cfg.dsn, w.cfg.idle)
	if err != nil {
		return err
	}
	defer db.close()
	if err := waitDB(ctx, db); err != nil {
		return err
	}
	etcd, err := clientv3.New(clientv3.Config{
		Endpoints:   w.cfg.etcd,
		DialTimeout: 2 * time.Second,
		// Notice a dead connection (a member killed, a network cut) within seconds.
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer etcd.Close()
	// One Client for the worker's life: a lost session ends the locks it held,
	// and the next Acquire starts a new session.
	locks, err := lockclient.New(etcd, lockclient.WithTTL(w.cfg.lease), lockclient.WithIdentity(w.cfg.id))
	if err != nil {
		return err
	}
	defer locks.Close()
	for done := 0; w.cfg.jobs == 0 || done < w.cfg.jobs; {
		if ctx.Err() != nil {
			return nil
		}
		account := w.cfg.accounts[w.rng.IntN(len(w.cfg.accounts))]
		lock, err := locks.Acquire(ctx, account)
		if err != nil {
			if ctx.Err() == nil {
				w.log.log(event{Event: "error", Account: account, Error: "acquire: " + err.Error()})
				w.sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		done++
		w.job(ctx, db, lock)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := lock.Release(rctx); err == nil {
			w.log.log(event{Event: "released", Account: account, Token: int64(lock.Token())})
		}
		cancel()
	}
	return nil
}

func (w *worker) mode() string {
	if w.cfg.noFence {
		return "no-fence"
	}
	return "fenced, grant=" + w.cfg.grant
}

// job is one read-modify-write of an account's balance under lock.
func (w *worker) job(ctx context.Context, db store, lock *lockclient.Lock) {
	account, token := lock.Resource(), int64(lock.Token())
	w.log.log(event{Event: "acquired", Account: account, Token: token})

	// The job's context ends with the lock (and with SIGTERM), as the library
	// recommends; a "token" grant is a writer that cannot see its lock, so only the
	// database can stop it.
	var grant fence.Grant = lock
	jobCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if w.cfg.grant == "lock" {
		stop := context.AfterFunc(lock.Context(), cancel)
		defer stop()
	} else {
		grant = fence.NewGrant(account, lock.Token())
	}
	watching := make(chan struct{})
	defer close(watching)
	go func() {
		select {
		case <-lock.Done():
			if !errors.Is(context.Cause(lock.Context()), fence.ErrLost) {
				return
			}
			reason := "the job goes on: it presents only its token"
			if w.cfg.grant == "lock" {
				<-jobCtx.Done()
				reason = "job context cancelled"
			}
			w.log.log(event{Event: "lost", Account: account, Token: token, Reason: reason})
		case <-watching:
		}
	}()

	// Work that does not look at the lock: a stop-the-world pause here is the
	// classic stale holder, which wakes and writes as if nothing happened.
	w.sleep(ctx, w.draw(w.cfg.think))
	if ctx.Err() != nil {
		return
	}

	// A transaction that cannot finish (its database frozen or cut off) is given
	// up after -timeout, like any job with a deadline.
	txCtx, cancelTx := jobCtx, context.CancelFunc(func() {})
	if w.cfg.timeout > 0 {
		txCtx, cancelTx = context.WithTimeout(jobCtx, w.cfg.timeout)
	}
	defer cancelTx()
	var value int64
	wrote := false
	fn := func(tx txn) error {
		balance, tokens, err := tx.read(txCtx, account)
		if err != nil {
			return err
		}
		w.log.log(event{Event: "read", Account: account, Token: token, Value: balance})
		w.sleep(txCtx, w.draw(w.cfg.job))
		value = balance + 1
		if err := tx.write(txCtx, account, value, append(tokens, token), token, w.cfg.id); err != nil {
			return err
		}
		wrote = true
		w.log.log(event{Event: "wrote", Account: account, Token: token, Value: value})
		// The window between the last write and COMMIT, where a fault can land.
		w.sleep(txCtx, w.draw(w.cfg.commitDelay))
		return txCtx.Err()
	}
	var err error
	if w.cfg.noFence {
		err = db.plain(txCtx, fn)
	} else {
		err = db.fenced(txCtx, grant, fn)
	}
	w.outcome(ctx, account, token, value, wrote, err)
}

// outcome logs how the job's write ended. Only fence.ErrCommitUnknown makes it
// "unknown"; every other error is a write that did not land ("aborted"), which the
// history checker holds the database to.
func (w *worker) outcome(ctx context.Context, account string, token, value int64, wrote bool, err error) {
	var stale *fence.StaleError
	switch {
	case err == nil:
		w.log.log(event{Event: "commit", Account: account, Token: token, Value: value})
	case errors.As(err, &stale):
		w.log.log(event{Event: "refused", Account: account, Token: token, Reason: "stale", Seen: int64(stale.Seen), Error: err.Error()})
	case errors.Is(err, fence.ErrLost):
		w.log.log(event{Event: "refused", Account: account, Token: token, Reason: "lost", Error: err.Error()})
	case errors.Is(err, fence.ErrCommitUnknown):
		// COMMIT was sent and no answer came back: it may or may not have landed.
		w.log.log(event{Event: "unknown", Account: account, Token: token, Value: value, Error: err.Error()})
	default:
		reason := "before its writes"
		if wrote {
			reason = "after its writes"
		}
		w.log.log(event{Event: "aborted", Account: account, Token: token, Value: value, Reason: reason, Error: err.Error()})
		// The database may be down: do not spin through locks meanwhile.
		w.sleep(ctx, 200*time.Millisecond)
	}
}

// draw picks a duration from s.
func (w *worker) draw(s span) time.Duration {
	if s.max <= s.min {
		return s.min
	}
	return s.min + time.Duration(w.rng.Int64N(int64(s.max-s.min)))
}

// sleep waits d or until ctx ends.
func (w *worker) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
