// Package sqlfence fences writes made through database/sql on MySQL/MariaDB
// (github.com/go-sql-driver/mysql), SQLite (modernc.org/sqlite, pure Go) and
// PostgreSQL (any database/sql driver, such as pgx's stdlib). It imports no driver:
// the subpackages sqlfence/mysql and sqlfence/sqlite open pools set up for a Store,
// so a program links only the driver of its database. A Store
// runs a function in a transaction that first raises the resource's row in
// fence_tokens to the grant's token, so a holder that lost its lock to a newer one is
// refused by the database itself; and it makes single-row writes on tables with a
// token column conditional on that column.
//
//	db, err := sqlite.Open("app.db") // sqlfence/sqlite; or sqlfence/mysql's mysql.Open(dsn)
//	...
//	err = migrations.Up(ctx, db, migrations.SQLite) // creates fence_tokens
//	store, err := sqlfence.New(db, migrations.SQLite)
//	...
//	err = fence.Exec(ctx, store, lock, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE invoices SET total = ? WHERE account = ?`, total, 42)
//		return err
//	})
//	if errors.Is(err, fence.ErrStale) { /* a newer holder wrote: stop, do not retry */ }
//
// The differences between the databases (identifier quoting, placeholders, the upsert
// syntax, how the driver reports unique-key violations and lock contention) follow
// the migrations.Dialect the Store is given; the code path is one.
//
// MySQL: a Store needs the connection flag clientFoundRows=true (an UPDATE that
// writes the values a row already has must count as done, not as refused). It checks
// once, on first use, by writing a probe row in fence_tokens twice inside a
// transaction it rolls back, and refuses a pool without the flag with an error
// wrapping fence.ErrInvalidArgument that says so. It does not check
// interpolateParams: without it the driver prepares and closes a server-side
// statement for every call (BENCHMARKS.md). sqlfence/mysql's Open sets both.
//
// SQLite: concurrent writers, in one process or several, need WAL, a busy timeout
// and BEGIN IMMEDIATE; sqlfence/sqlite's Open sets all three. When the begin of a fenced
// transaction finds the database locked (nothing of the caller's has run yet), the
// Store tries again until ctx ends; a lock that outlasts ctx returns ctx's error,
// wrapped in fence.ErrBusy when the driver gave up before ctx did. The driver's raw
// "database is locked" does not reach the caller from the Store's own statements.
package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

var (
	_ fence.Store[*sql.Tx] = (*Store)(nil)
)

// Store fences transactions and single-row writes on one database. It implements
// fence.Store[*sql.Tx] and the single-row writes Update, Upsert and Delete. It is safe for concurrent use and holds
// no connection of its own.
type Store struct {
	db     *sql.DB
	d      database
	txOpts *sql.TxOptions  // Fenced's transactions; nil: the server's default
	set    engine.Settings // WithIdleTimeout, WithObserver, WithKeyTTL
	// mariadb: the MySQL dialect's server is MariaDB (idle_transaction_timeout);
	// set by the connection check, before probeOK.
	mariadb bool

	probeOK atomic.Bool // the MySQL connection check passed: the fast path
	probeMu sync.Mutex
	probed  bool  // the check ran to a verdict
	probeE  error // its verdict: nil, or the refusal

	shapes shapeCache // Decrement's SQL per counter shape; see stmtcache.go
}

// Fenced runs fn in a transaction fenced for g and commits it, as the fence.Store
// contract says (the fence package doc states it, with its errors); the fence is
// raised before fn runs. Besides the contract's errors: fence.ErrInvalidArgument for
// a MySQL pool without clientFoundRows, fence.ErrSchema without the migrations,
// fence.ErrBusy when the database stayed locked until ctx ended or refused the
// commit (nothing was written). SQLite commits in-process, so its COMMIT errors are
// the engine's answer, never fence.ErrCommitUnknown.
func (s *Store) Fenced(ctx context.Context, g fence.Grant, fn func(*sql.Tx) error) (err error) {
	defer s.observe("fenced", &err)
	c, err := s.check(g)
	switch {
	case err != nil:
		return err
	case fn == nil:
		return fmt.Errorf("%w: nil function", fence.ErrInvalidArgument)
	}
	if err := s.d.probe(ctx, s); err != nil {
		return err
	}
	return s.d.fenced(ctx, s, c, fn)
}

// run is Fenced's transaction on b: begin and raise (beginFenced), then finish.
func (s *Store) run(ctx context.Context, b beginner, g *engine.Checked, fn func(*sql.Tx) error) error {
	tx, err := s.beginFenced(ctx, b, g)
	if err != nil {
		return err
	}
	return s.finish(ctx, tx, g, fn)
}

// finish runs fn in the open fenced tx and ends it through the lifecycle
// (engine.RunTx); any error of fn's that says the server ended the transaction for
// idling becomes fence.ErrIdleTimeout.
func (s *Store) finish(ctx context.Context, tx *sql.Tx, g *engine.Checked, fn func(*sql.Tx) error) error {
	t := &fencedTx{s: s, ctx: ctx, tx: tx, g: g, op: "commit", begun: time.Now()}
	return engine.RunTx(g, t, func() error {
		err := fn(tx)
		if e := s.idleEnded(g, t.begun, err, false); e != nil {
			return e
		}
		return err
	})
}

// fencedTx is an open fenced *sql.Tx as the lifecycle ends it (engine.Tx).
type fencedTx struct {
	s     *Store
	ctx   context.Context
	tx    *sql.Tx
	g     *engine.Checked
	op    string    // what a lost COMMIT reply is reported as: "commit", or the write's name
	begun time.Time // when the raise returned: a bound on how long it can have sat idle
}

func (t *fencedTx) Refused() error { return nil }          // the raise ran before fn
func (t *fencedTx) Rollback()      { _ = t.tx.Rollback() } // after Commit, ErrTxDone

func (t *fencedTx) Commit() error {
	err := t.tx.Commit()
	if err == nil {
		return nil
	}
	if e := t.s.idleEnded(t.g, t.begun, err, true); e != nil {
		return e
	}
	if u := t.s.unknownOutcome(t.op, t.g, err, true); u != nil {
		return u
	}
	return t.s.commitErr(t.ctx, err)
}

func (s *Store) commitErr(ctx context.Context, err error) error {
	switch {
	case s.d.busy(err):
		return fmt.Errorf("%w: commit refused, nothing was written: %w", fence.ErrBusy, err)
	case errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil:
		return fmt.Errorf("sqlfence: commit: %w (rolled back)", ctx.Err())
	}
	return fmt.Errorf("sqlfence: commit: %w", err)
}

// check is the door of every fenced write: it refuses a store or grant that cannot
// be used, before any I/O, and returns the grant checked and normalized once.
func (s *Store) check(g fence.Grant) (*engine.Checked, error) {
	if s == nil || s.db == nil {
		return nil, fmt.Errorf("%w: nil store", fence.ErrInvalidArgument)
	}
	return engine.Check(g)
}

// beginner is a *sql.DB or a pinned *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// beginFenced begins a transaction and raises the fence row, trying again while the
// database is busy: nothing of the caller's has run yet. It returns the open
// transaction, or an error after rolling back.
func (s *Store) beginFenced(ctx context.Context, db beginner, g *engine.Checked) (*sql.Tx, error) {
	var tx *sql.Tx
	err := s.retry(ctx, func() error {
		var err error
		if tx, err = db.BeginTx(ctx, s.txOpts); err != nil {
			return fmt.Errorf("sqlfence: begin: %w", err)
		}
		if err = s.raise(ctx, tx, g); err != nil {
			tx.Rollback()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// raise raises g's fence row or rows inside tx.
func (s *Store) raise(ctx context.Context, tx *sql.Tx, g *engine.Checked) error {
	if engine.Multi(g) {
		return s.raiseSet(ctx, tx, g)
	}
	return s.d.raise(ctx, s, tx, g)
}

// bumpOrUpsert is the raise of MySQL and SQLite. The common case, a row that exists
// with a token not higher, is one plain UPDATE, bump (cheaper for the server than an
// upsert, which tries the insert first). Zero rows matched means no row yet or a
// higher token: then upsert inserts the row, or raised reports it refused and the
// stored token when the database hands it back (0: read it).
func (s *Store) bumpOrUpsert(ctx context.Context, tx *sql.Tx, g *engine.Checked, bump, upsert string,
	raised func(sql.Result) (stale bool, seen fence.Token, err error)) error {
	tok := int64(g.Token())
	res, err := tx.ExecContext(ctx, bump, tok, g.Resource(), tok)
	if err != nil {
		return s.raiseErr(g, err)
	}
	// Matched rows: clientFoundRows on MySQL (checked by probe), always on SQLite.
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlfence: raise fence row %q: %w", g.Resource(), err)
	} else if n > 0 {
		return nil
	}
	if res, err = tx.ExecContext(ctx, upsert, g.Resource(), tok); err != nil {
		return s.raiseErr(g, err)
	}
	stale, seen, err := raised(res)
	if err != nil {
		return fmt.Errorf("sqlfence: raise fence row %q: %w", g.Resource(), err)
	}
	if !stale {
		return nil
	}
	if seen == 0 {
		var v int64
		err := tx.QueryRowContext(ctx, "SELECT token FROM fence_tokens WHERE resource = ?", g.Resource()).Scan(&v)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlfence: read fence row %q: %w", g.Resource(), err)
		}
		seen = fence.Token(v)
	}
	return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
}

// retry runs attempt until it returns an error that is not busy(), or ctx ends. Each
// attempt must leave nothing behind when it fails. The backoff is short and jittered:
// the database's own lock wait (busy_timeout, innodb_lock_wait_timeout) does the
// waiting; this only covers a lock that outlasts it, or a pool without one.
func (s *Store) retry(ctx context.Context, attempt func() error) error {
	wait := time.Millisecond
	for {
		err := attempt()
		if err == nil || !s.d.busy(err) {
			return err
		}
		if cause := engine.Pause(ctx, &wait, 100*time.Millisecond); cause != nil {
			return fmt.Errorf("%w: %w; last error: %w", fence.ErrBusy, cause, err)
		}
	}
}

// undecided is replyLost for an error no database's classification decided: errors
// database/sql or the driver raise before sending (driver.ErrBadConn, a done Tx or
// Conn, ctx's own error returned unwrapped by database/sql when ctx ended before the
// COMMIT went out) are decided; a broken or closed connection (EOF, a network error,
// ctx ending while the reply was awaited) leaves the outcome unknown.
func undecided(err error, commit bool) bool {
	switch {
	case err == nil, errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrTxDone), errors.Is(err, sql.ErrConnDone):
		return false
	case commit && (err == context.Canceled || err == context.DeadlineExceeded):
		// Tx.Commit checks ctx before sending; a driver that reads the reply under
		// ctx wraps its error.
		return false
	}
	return true
}

// unknownOutcome returns fence.ErrCommitUnknown for err, from a COMMIT or from a
// write sent outside a transaction, when its reply was lost: the statement was (or
// may have been) sent and no answer of the server's decides it. Otherwise nil.
func (s *Store) unknownOutcome(op string, g fence.Grant, err error, commit bool) error {
	if err == nil || !s.d.replyLost(err, commit) {
		return nil
	}
	return engine.CommitUnknown(g, op, err)
}

// idleEnded returns fence.ErrIdleTimeout wrapping err when err, from fn (commit
// false) or from COMMIT, says that the server ended the fenced transaction begun at
// begun for sitting idle past its timeout; otherwise nil.
func (s *Store) idleEnded(g fence.Grant, begun time.Time, err error, commit bool) error {
	if err == nil || errors.Is(err, fence.ErrIdleTimeout) {
		return nil
	}
	if !s.d.idleEnded(err, commit, time.Since(begun) >= engine.IdleTimeout(g, s.set.Idle)) {
		return nil
	}
	return engine.IdleTimeoutErr(g, err)
}

// missingSchema reports whether err says the fence_tokens table does not exist.
func (s *Store) missingSchema(err error) bool { return s.d.missingTable(err, "fence_tokens") }

func (s *Store) raiseErr(g fence.Grant, err error) error {
	if s.missingSchema(err) {
		return fmt.Errorf("%w: raise fence row %q: %w", fence.ErrSchema, g.Resource(), err)
	}
	return fmt.Errorf("sqlfence: raise fence row %q to %d: %w", g.Resource(), g.Token(), err)
}

// keyErr wraps an error of the idempotency-key statements. busy still sees the
// driver's error through it.
func (s *Store) keyErr(op string, err error) error {
	if errors.Is(err, fence.ErrBusy) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if s.d.missingTable(err, "idempotency_keys") {
		return fmt.Errorf("%w: %s: %w", fence.ErrSchema, op, err)
	}
	return fmt.Errorf("sqlfence: %s: %w", op, err)
}
