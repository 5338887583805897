package sqlfence

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/idemkey"
	"github.com/fencegate/fencegate/migrations"
)

// Option configures a Store; see NewWithOptions.
type Option func(*Store) error

// WithTxOptions sets the isolation level of the transactions Fenced begins. MySQL
// and PostgreSQL fence READ UNCOMMITTED, READ COMMITTED, REPEATABLE READ and
// SERIALIZABLE alike: the fence row is written, so it is locked and read current
// whatever the level (on PostgreSQL a raise that meets a newer raise after its
// snapshot is a serialization failure, and the Store begins again, nothing of the
// caller's having run). A level other than the default costs one more round trip per
// transaction (the driver sends SET TRANSACTION first). SQLite transactions are
// always serializable: only the default and sql.LevelSerializable are accepted. A
// read-only transaction cannot raise the fence and is refused, as are other levels;
// the error matches ErrInvalidOption.
func WithTxOptions(o sql.TxOptions) Option {
	return func(s *Store) error {
		if o.ReadOnly {
			return fmt.Errorf("%w: a read-only transaction cannot raise the fence", ErrInvalidOption)
		}
		switch o.Isolation {
		case sql.LevelDefault, sql.LevelSerializable:
		case sql.LevelReadUncommitted, sql.LevelReadCommitted, sql.LevelRepeatableRead:
			if s.d == dSQLite {
				return fmt.Errorf("%w: isolation level %s: %s transactions are always serializable", ErrInvalidOption, o.Isolation, s.d)
			}
		default:
			return fmt.Errorf("%w: isolation level %s is not supported by %s", ErrInvalidOption, o.Isolation, s.d)
		}
		if o.Isolation != sql.LevelDefault {
			s.txOpts = &sql.TxOptions{Isolation: o.Isolation}
		}
		return nil
	}
}

// NewWithOptions is New with options. It returns migrations.ErrUnknownDialect for an unknown
// dialect, fence.ErrInvalidArgument for a nil db and ErrInvalidOption for an option
// that cannot be used (with a nil Store). New reports the first two on use instead.
func NewWithOptions(db *sql.DB, md migrations.Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", fence.ErrInvalidArgument)
	}
	d := dialect(md)
	if err := d.check(); err != nil {
		return nil, err
	}
	s := &Store{db: db, d: d}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// WithKeyTTL makes Once store idempotency keys that expire d after they are stored
// (see Once); Store.PurgeExpiredKeys deletes them. Without it keys never expire. A d
// under one microsecond, the precision stored, is an error wrapping
// fence.ErrInvalidArgument.
func WithKeyTTL(d time.Duration) Option {
	return func(s *Store) error {
		if err := idemkey.CheckTTL(d); err != nil {
			return fmt.Errorf("sqlfence: %w", err)
		}
		s.keyTTL = d
		return nil
	}
}
