package sqlfence

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/fencedtx"
	"github.com/fencegate/fencegate/migrations"
)

// Option configures a Store; see New.
type Option func(*Store) error

// New returns a Store writing through db in dialect d, with no I/O; fence_tokens must
// exist (migrations.Up). A nil db, an unknown dialect or an unusable option (named) is
// fence.ErrInvalidArgument; a nil Option is ignored.
func New(db *sql.DB, d migrations.Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlfence: nil *sql.DB", fence.ErrInvalidArgument)
	}
	dd, err := newDatabase(d)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, d: dd, keys: keyStmts(dd)}
	if err := fencedtx.Apply(s, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// WithTxOptions sets the isolation level of Fenced's and Once's transactions. MySQL and
// PostgreSQL fence every level, the fence row being written, so locked and read current
// (PostgreSQL's 40001 at the raise begins again, before fn); a non-default level costs
// a round trip (SET TRANSACTION). SQLite takes the default and sql.LevelSerializable.
// Other levels and read-only are fence.ErrInvalidArgument.
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

// WithKeyTTL makes Once's keys expire d after they are stored (see [nolock]);
// PurgeExpiredKeys deletes them. Under a microsecond is fence.ErrInvalidArgument.
func WithKeyTTL(d time.Duration) Option {
	return func(s *Store) error { return s.set.SetKeyTTL("sqlfence", d) }
}

// WithObserver reports every fenced write's result (Fenced, Update, Upsert, Delete) to
// obs as adapter "sqlfence"; a nil obs, the default, reports nothing.
func WithObserver(obs fence.WriteObserver) Option {
	return func(s *Store) error { s.set.Obs = obs; return nil }
}

func (s *Store) observe(op string, errp *error) {
	if s != nil {
		s.set.Observe("sqlfence", op, errp)
	}
}

// WithIdleTimeout bounds how long a fenced transaction may sit idle on the server
// before the server ends it, so a holder frozen inside fn holds up its successor about
// one lease. Default: the grant's lease (fence.Leased), else 10 s; under a millisecond
// is fence.ErrInvalidArgument. Fenced then returns fence.ErrIdleTimeout wrapping the
// driver's error, or, on PostgreSQL where fn swallowed it, fence.ErrCommitUnknown.
// PostgreSQL and MariaDB end the transaction; SQLite has nothing to set (a waiter
// ends with ctx). How each database is told: docs/design.md, "A holder frozen
// inside a transaction".
func WithIdleTimeout(d time.Duration) Option {
	return func(s *Store) error { return s.set.SetIdleTimeout("sqlfence", d) }
}
