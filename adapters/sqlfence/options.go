package sqlfence

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/migrations"
)

// Option configures a Store; see New.
type Option func(*Store) error

// WithTxOptions sets the isolation level of the transactions Fenced begins. MySQL
// and PostgreSQL fence READ UNCOMMITTED, READ COMMITTED, REPEATABLE READ and
// SERIALIZABLE alike: the fence row is written, so it is locked and read current
// whatever the level (on PostgreSQL a raise that meets a newer raise after its
// snapshot is a serialization failure, and the Store begins again, nothing of the
// caller's having run). A level other than the default costs one more round trip per
// transaction (the driver sends SET TRANSACTION first). SQLite transactions are
// always serializable: only the default and sql.LevelSerializable are accepted. A
// read-only transaction cannot raise the fence and is refused, as are other levels
// (New's error wraps fence.ErrInvalidArgument).
func WithTxOptions(o sql.TxOptions) Option {
	return func(s *Store) error {
		if o.ReadOnly {
			return optionErr("WithTxOptions", "a read-only transaction cannot raise the fence")
		}
		switch o.Isolation {
		case sql.LevelDefault, sql.LevelSerializable:
		case sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead:
			if err := s.d.isolation(o.Isolation); err != nil {
				return optionErr("WithTxOptions", "%v", err)
			}
		default:
			return optionErr("WithTxOptions", "isolation level %s is not supported by %s", o.Isolation, s.d.dialect())
		}
		if o.Isolation != sql.LevelDefault {
			s.txOpts = &sql.TxOptions{Isolation: o.Isolation}
		}
		return nil
	}
}

// New returns a Store writing through db in dialect d; the library's fence_tokens
// table must exist (migrations.Up creates it). It does no I/O. It returns an error
// wrapping fence.ErrInvalidArgument, and a nil Store, for a nil db, an unknown
// dialect and an option that cannot be used (the error names it). A nil Option is ignored.
func New(db *sql.DB, d migrations.Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlfence: nil *sql.DB", fence.ErrInvalidArgument)
	}
	dd, err := newDatabase(d)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, d: dd}
	if err := engine.Apply(s, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// WithKeyTTL makes Once store idempotency keys that expire d after they are stored
// (see Once); Store.PurgeExpiredKeys deletes them. Without it keys never expire. A d
// under one microsecond, the precision stored, is an error wrapping
// fence.ErrInvalidArgument.
func WithKeyTTL(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetKeyTTL("sqlfence", d)
	}
}

// optionErr is the error of an option that cannot be used, naming it.
func optionErr(option, format string, args ...any) error {
	return fmt.Errorf("sqlfence: %s: %s: %w", option, fmt.Sprintf(format, args...), fence.ErrInvalidArgument)
}

// WithObserver makes the Store report the result of every fenced write
// (Fenced, Update, Upsert, Delete) to obs, with adapter "sqlfence": the lockmetrics
// package counts them, and an observer of the program's own can log the refusals
// (errors.Is fence.ErrStale or fence.ErrLost; a *fence.StaleError names the
// resource, the token presented and the one stored). A nil obs, the default,
// reports nothing.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error {
		s.set.Obs = obs
		return nil
	}
}

// observe reports a fenced write's result; deferred by each fenced method.
func (s *Store) observe(op string, errp *error) {
	if s != nil {
		s.set.Observe("sqlfence", op, errp)
	}
}

// WithIdleTimeout sets how long a fenced transaction may sit idle on the server
// (between statements, or before COMMIT) before the server ends it, so that a holder
// frozen inside fn (a stopped process) holding the fence row cannot hold up its
// successor much longer than its lease. The default is the grant's lease when it
// implements fence.Leased, else 10 s (the lock service's default lease).
// A d under a millisecond is refused (fence.ErrInvalidArgument). Per database:
//
//   - PostgreSQL: idle_in_transaction_session_timeout, set for the transaction only
//     (set_config(..., true)) inside the fence raise statement: no round trip of its
//     own. The server ends the session (SQLSTATE 25P03).
//   - MariaDB: idle_transaction_timeout (whole seconds, rounded up) on the session,
//     restored to the server's default when the transaction ends, so a connection
//     returns to the pool with the server's default and the caller's own
//     transactions never inherit it. Through a pool opened by sqlfence/mysql this costs
//     no round trip: the SET, BEGIN and fence raise are one compound statement, and
//     COMMIT (or ROLLBACK) and the restore another. Through a pool opened otherwise
//     the transaction runs on a pinned connection whose timeout is set before BEGIN
//     and restored after: two round trips more. MySQL, which lacks
//     idle_transaction_timeout, gets wait_timeout the second way.
//   - SQLite: nothing to set. Writers are one host's processes and the lock is the
//     database file's: a frozen writer holds it until it wakes or dies, and a
//     waiter's call ends with its ctx's error, wrapped in fence.ErrBusy where the Store
//     was retrying (the driver's busy timeout, 5 s with sqlfence/sqlite, bounds each
//     wait; the Store retries until ctx ends).
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error {
		return s.set.SetIdleTimeout("sqlfence", d)
	}
}
