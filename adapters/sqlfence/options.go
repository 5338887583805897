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

// New returns a Store writing through db in dialect d; the fence_tokens table must
// exist (migrations.Up creates it). It does no I/O. A nil db, an unknown dialect or an
// option that cannot be used (the error names it) returns a nil Store and an error
// wrapping fence.ErrInvalidArgument. A nil Option is ignored.
func New(db *sql.DB, d migrations.Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlfence: nil *sql.DB", fence.ErrInvalidArgument)
	}
	dd, err := newDatabase(d)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, d: dd, keys: keyStmts(dd)}
	if err := engine.Apply(s, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// WithTxOptions sets the isolation level of Fenced's and Once's transactions. MySQL
// and PostgreSQL fence every level alike: the fence row is written, so it is locked
// and read current (on PostgreSQL a raise that meets a newer one after its snapshot
// is a serialization failure, and the Store begins again, nothing of the caller's
// having run). A level other than the default costs a round trip per transaction
// (SET TRANSACTION). SQLite takes only the default and sql.LevelSerializable. Other
// levels and a read-only transaction (it cannot raise the fence) are refused: New's
// error wraps fence.ErrInvalidArgument.
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

func optionErr(option, format string, args ...any) error {
	return fmt.Errorf("sqlfence: %s: %s: %w", option, fmt.Sprintf(format, args...), fence.ErrInvalidArgument)
}

// WithKeyTTL makes Once's idempotency keys expire d after they are stored;
// PurgeExpiredKeys deletes them. Without it keys never expire. A d under a
// microsecond, the precision stored, is an error wrapping fence.ErrInvalidArgument.
func WithKeyTTL(d time.Duration) Option {
	return func(s *Store) error { return s.set.SetKeyTTL("sqlfence", d) }
}

// WithObserver makes the Store report the result of every fenced write (Fenced,
// Update, Upsert, Delete) to obs, as adapter "sqlfence": lockmetrics counts them, and
// an observer of the program's own can log the refusals. A nil obs, the default,
// reports nothing.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error { s.set.Obs = obs; return nil }
}

func (s *Store) observe(op string, errp *error) {
	if s != nil {
		s.set.Observe("sqlfence", op, errp)
	}
}

// WithIdleTimeout sets how long a fenced transaction may sit idle on the server
// (between statements, or before COMMIT) before the server ends it, so that a holder
// frozen inside fn cannot hold up its successor much longer than its lease. The
// default is the grant's lease when it implements fence.Leased, else 10 s (the lock
// service's default lease). A d under a millisecond is refused
// (fence.ErrInvalidArgument).
//
//   - PostgreSQL: idle_in_transaction_session_timeout for the transaction only, set
//     inside the raise statement (no round trip of its own); the server ends the
//     session (SQLSTATE 25P03).
//   - MariaDB: idle_transaction_timeout (whole seconds, rounded up) on the session,
//     restored to the server's default when the transaction ends, so pooled
//     connections and the caller's own transactions never inherit it. Through a pool
//     opened by sqlfence/mysql it costs no round trip (the SET, BEGIN and raise are
//     one statement, COMMIT or ROLLBACK and the restore another); through another
//     pool, two, on a pinned connection. MySQL gets wait_timeout that second way.
//   - SQLite: nothing to set. A frozen writer holds the file's lock until it wakes or
//     dies; a waiter's call ends with its ctx's error, wrapped in fence.ErrBusy where
//     the Store was retrying (the driver's busy timeout, 5 s with sqlfence/sqlite,
//     bounds each wait; the Store retries until ctx ends).
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error { return s.set.SetIdleTimeout("sqlfence", d) }
}
