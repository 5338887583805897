// Package sqlfence fences writes made through database/sql as the [fence] package doc
// says (Fenced, and the single-row Update, Upsert and Delete), with [nolock]'s Once,
// Decrement and Insert, on MySQL/MariaDB (go-sql-driver/mysql), SQLite
// (modernc.org/sqlite) and PostgreSQL (any driver). It imports no driver:
// sqlfence/mysql and sqlfence/sqlite open pools set up for a Store.
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
// # MySQL
//
// A Store needs clientFoundRows=true (an UPDATE writing the values a row has must count
// as done). On first use it writes a probe row in fence_tokens twice, in a transaction
// it rolls back, and refuses a pool without it with an error wrapping
// fence.ErrInvalidArgument that says so. interpolateParams is not checked (without it
// each call prepares and closes a statement). sqlfence/mysql's Open sets both.
//
// # SQLite
//
// Concurrent writers need WAL, a busy timeout and BEGIN IMMEDIATE, which
// sqlfence/sqlite's Open sets. A fenced begin that finds the database locked (before
// fn runs) is tried again until ctx ends, then returns ctx's error, wrapped in
// fence.ErrBusy when the driver gave up first; the Store's own statements never return
// the driver's "database is locked".
//
// # PostgreSQL behind a pooler, and replication
//
// The raise is sent without parameters, so it prepares nothing. Behind a transaction
// pooler (PgBouncer's pool_mode = transaction) the single-row writes, Once, Decrement,
// Insert and fn's statements need a driver mode that prepares nothing by name: with
// pgx's stdlib, default_query_exec_mode=cache_describe, exec or simple_protocol in the
// DSN; its default cache_statement fails with 42P05 or 26000.
//
// database/sql hands a Store no server notices, so a COMMIT whose wait for a
// synchronous standby was cancelled (PostgreSQL then commits locally with a WARNING)
// returns nil here; pgxfence.WatchReplication reports it as fence.ErrNotReplicated.
package sqlfence

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/fencedtx"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/nolockpath"
	"github.com/fencegate/fencegate/nolock"
)

var _ fence.Store[*sql.Tx] = (*Store)(nil)

// Store is a [fence.Store] of *sql.Tx, with single-row writes, on one database. It is
// safe for concurrent use and holds no connection of its own.
type Store struct {
	db      *sql.DB
	d       database
	txOpts  *sql.TxOptions    // Fenced's and Once's; nil: the server's default
	set     fencedtx.Settings // WithIdleTimeout, WithObserver, WithKeyTTL
	keys    keySQL            // the idempotency-key statements, built by New
	mariadb bool              // set by the MySQL probe, before probeOK

	probeOK atomic.Bool // the MySQL probe passed
	probeMu sync.Mutex
	probeE  error // the MySQL probe's refusal, once it refused

	shapes shapeCache // Decrement's statements (stmtcache.go)
}

// Fenced is [fence.Store]'s Fenced, the fence raised before fn runs. It also returns
// MySQL's probe refusal, fence.ErrSchema without the migrations, and fence.ErrBusy
// when the database stayed locked until ctx ended or refused the commit (nothing
// written). SQLite commits in-process: never fence.ErrCommitUnknown.
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

// usable and check refuse an unusable Store or grant before any I/O.
func (s *Store) usable() error {
	if s == nil || s.db == nil || s.d == nil {
		return fmt.Errorf("%w: nil store or *sql.DB", fence.ErrInvalidArgument)
	}
	return nil
}

func (s *Store) check(g fence.Grant) (*grant.Checked, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	return grant.Check(g)
}

// beginner is a *sql.DB or a pinned *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// run is Fenced's transaction on b; begin and raise are retried while busy: fn has not run.
func (s *Store) run(ctx context.Context, b beginner, g *grant.Checked, fn func(*sql.Tx) error) error {
	var tx *sql.Tx
	if err := s.retry(ctx, func() (err error) { tx, err = s.beginRaise(ctx, b, s.txOpts, g); return err }); err != nil {
		return err
	}
	return s.finish(ctx, tx, g, fn)
}

// beginRaise begins a transaction and raises g's fence rows, rolling back on error.
func (s *Store) beginRaise(ctx context.Context, b beginner, opts *sql.TxOptions, g *grant.Checked) (*sql.Tx, error) {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("sqlfence: begin: %w", err)
	}
	if g.Multi() {
		err = s.d.raiseSet(ctx, s, tx, g)
	} else {
		err = s.d.raise(ctx, s, tx, g)
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

// finish runs fn in tx and ends it (fencedtx.Run), fn's idle-ended error as ErrIdleTimeout.
func (s *Store) finish(ctx context.Context, tx *sql.Tx, g *grant.Checked, fn func(*sql.Tx) error) error {
	return fencedtx.Run(g, &fencedTx{s: s, ctx: ctx, tx: tx, g: g, op: "commit", begun: time.Now()}, tx, fn)
}

// fencedTx is an open fenced *sql.Tx as fencedtx.Run ends it.
type fencedTx struct {
	s     *Store
	ctx   context.Context
	tx    *sql.Tx
	g     *grant.Checked
	op    string    // what a lost COMMIT reply is reported as: "commit", or the write's name
	begun time.Time // when the raise returned: a bound on how long it can have sat idle
}

func (t *fencedTx) Refused() error { return nil }          // the raise ran before fn
func (t *fencedTx) Rollback()      { _ = t.tx.Rollback() } // after Commit, ErrTxDone

// FnErr: the user's fn (op "commit") may meet a transaction ended idle; a write's own
// statements run at once.
func (t *fencedTx) FnErr(err error) error {
	if t.op != "commit" {
		return err
	}
	return cmp.Or(t.s.idleEnded(t.g, t.begun, err, false), err)
}

func (t *fencedTx) Commit() error {
	if err := t.tx.Commit(); err != nil {
		// The first that applies: ended idle, reply lost, refused, failed.
		return cmp.Or(t.s.idleEnded(t.g, t.begun, err, true), t.s.unknownOutcome(t.op, t.g, err, true), t.s.commitErr(t.ctx, err))
	}
	return nil
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

// bumpOrUpsert is MySQL's and SQLite's raise: the plain UPDATE bump (cheaper than an
// upsert, which tries the insert first), else upsert; raised reads whether it was
// refused and the stored token (0: read it).
func (s *Store) bumpOrUpsert(ctx context.Context, tx *sql.Tx, g *grant.Checked, bump, upsert string,
	raised func(sql.Result) (stale bool, seen fence.Token, err error)) error {
	tok := int64(g.Token())
	// Matched rows: clientFoundRows on MySQL (checked by probe), always on SQLite.
	if n, err := affected(tx.ExecContext(ctx, bump, tok, g.Resource(), tok)); err != nil || n > 0 {
		return s.raiseErr(g, err)
	}
	res, err := tx.ExecContext(ctx, upsert, g.Resource(), tok)
	if err != nil {
		return s.raiseErr(g, err)
	}
	refused, seen, err := raised(res)
	if err != nil || !refused {
		return s.raiseErr(g, err)
	}
	if seen == 0 {
		if seen, _, err = s.mark(ctx, tx, g.Resource()); err != nil {
			return err
		}
	}
	return stale(g, seen)
}

// mark reads a resource's fence token; found: it has a fence row.
func (s *Store) mark(ctx context.Context, q querier, resource string) (tok fence.Token, found bool, err error) {
	var v int64
	switch err = q.QueryRowContext(ctx, s.d.markSQL(), resource).Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, s.wrap(err, fmt.Sprintf("read fence row %q", resource), "", "fence_tokens")
	}
	return fence.Token(v), true, nil
}

func stale(g fence.Grant, seen fence.Token) error {
	return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
}

func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// retry runs attempt, which leaves nothing behind when it fails, until it is not busy
// or ctx ends. The database's lock wait (busy_timeout, innodb_lock_wait_timeout) does
// the waiting; the short backoff covers what outlasts it.
func (s *Store) retry(ctx context.Context, attempt func() error) error {
	wait := time.Millisecond
	for {
		err := attempt()
		if err == nil || !s.d.busy(err) {
			return err
		}
		if cause := nolockpath.Pause(ctx, &wait, 100*time.Millisecond); cause != nil {
			return fmt.Errorf("%w: %w; last error: %w", fence.ErrBusy, cause, err)
		}
	}
}

// undecided is replyLost for an error no database decided: what is raised before
// sending (driver.ErrBadConn, a done Tx or Conn, Tx.Commit's bare ctx error) decides;
// a broken connection (EOF, network, ctx ended awaiting the reply) leaves it unknown.
func undecided(err error, commit bool) bool {
	switch {
	case err == nil, errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrTxDone), errors.Is(err, sql.ErrConnDone):
		return false
	case commit && (err == context.Canceled || err == context.DeadlineExceeded):
		return false
	}
	return true
}

// unknownOutcome is fence.ErrCommitUnknown when err, of a COMMIT or a write outside a
// transaction, says its reply was lost; else nil.
func (s *Store) unknownOutcome(op string, g fence.Grant, err error, commit bool) error {
	if err == nil || !s.d.replyLost(err, commit) {
		return nil
	}
	return grant.CommitUnknown(g, op, err)
}

// idleEnded is fence.ErrIdleTimeout when err, of fn or COMMIT, says the server ended
// the transaction begun at begun for idling; else nil.
func (s *Store) idleEnded(g *grant.Checked, begun time.Time, err error, commit bool) error {
	if err == nil || errors.Is(err, fence.ErrIdleTimeout) ||
		!s.d.idleEnded(err, commit, time.Since(begun) >= g.IdleTimeout(s.set.Idle)) {
		return nil
	}
	return grant.IdleTimeoutErr(g, err)
}

func (s *Store) missingSchema(err error) bool { return s.d.missingTable(err, "fence_tokens") }

func (s *Store) raiseErr(g fence.Grant, err error) error {
	if err == nil {
		return nil
	}
	return s.wrap(err, fmt.Sprintf("raise fence row %q to %d", g.Resource(), g.Token()), "", "fence_tokens")
}

// wrap names op (and table) in a driver's error, fence.ErrSchema when it says table
// schema is missing; refusals, fence's errors and ctx's pass as they are.
func (s *Store) wrap(err error, op, table, schema string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fence.ErrStale), errors.Is(err, nolock.ErrDuplicate), errors.Is(err, fence.ErrNotFound),
		errors.Is(err, fence.ErrCommitUnknown), errors.Is(err, fence.ErrInvalidArgument), errors.Is(err, fence.ErrBusy),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case schema != "" && s.d.missingTable(err, schema):
		return fmt.Errorf("%w: %s: %w", fence.ErrSchema, op, err)
	case table != "":
		return fmt.Errorf("sqlfence: %s %q: %w", op, table, err)
	}
	return fmt.Errorf("sqlfence: %s: %w", op, err)
}
