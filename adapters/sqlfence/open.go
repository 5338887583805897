package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite" // registers the "sqlite" driver OpenSQLite opens

	"github.com/fencegate/fencegate/fence"
)

// OpenMySQL opens a MySQL/MariaDB pool for a Store: it parses dsn with
// mysql.ParseDSN and sets clientFoundRows=true (matched rows, so a fenced write of
// unchanged values counts as done) and interpolateParams=true (one round trip per
// statement instead of prepare, execute and close; left off for the few collations
// the driver will not interpolate into, such as sjis). Like sql.Open it does no I/O,
// and like any *sql.DB the pool keeps only 2 idle connections unless told otherwise:
// under concurrent load call SetMaxIdleConns, or connections are opened and closed
// all the time.
//
// On MariaDB, a fenced transaction through the pool costs the round trips of an
// unfenced one: its begin, idle timeout and fence raise travel as one statement, its
// COMMIT and the timeout's restore as another (see WithIdleTimeout). For this the
// pool's connections are the driver's wrapped: every interface of the driver's
// connection is kept, but sql.Conn.Raw hands out the wrapper, not the driver's type.
//
// A DSN the driver cannot parse returns fence.ErrInvalidArgument wrapping the
// driver's error.
func OpenMySQL(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: mysql dsn: %w", fence.ErrInvalidArgument, err)
	}
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		// The driver will not interpolate into multi-byte collations whose
		// encoding can hide a quote (sjis, gbk, ...): prepare per call there.
		cfg.InterpolateParams = false
		conn, err = mysql.NewConnector(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: mysql dsn: %w", fence.ErrInvalidArgument, err)
	}
	if cfg.InterpolateParams {
		// The one-statement begin of a fenced transaction on MariaDB (mariadb.go)
		// sends its arguments interpolated.
		return sql.OpenDB(fastConnector{conn}), nil
	}
	return sql.OpenDB(conn), nil
}

// SQLiteBusyTimeoutMS is the busy timeout OpenSQLite sets, in milliseconds: how long
// one statement waits for another connection's write lock before SQLITE_BUSY.
const SQLiteBusyTimeoutMS = 5000

// OpenSQLite opens the SQLite database file at path (created if missing) for
// concurrent writers from many goroutines and processes: WAL (readers do not block the
// writer), a busy timeout of SQLiteBusyTimeoutMS, synchronous=NORMAL (durable at
// checkpoints, safe from corruption, as SQLite recommends with WAL) and BEGIN
// IMMEDIATE, so a transaction takes the write lock at begin and a fenced transaction
// holds its fence from its first statement. Like sql.Open it does no I/O.
//
// path is a file name, not a URI; ":memory:" is refused with fence's
// ErrInvalidArgument since each pooled connection would get its own empty database.
func OpenSQLite(path string) (*sql.DB, error) {
	switch {
	case path == "":
		return nil, fmt.Errorf("%w: empty sqlite path", fence.ErrInvalidArgument)
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return nil, fmt.Errorf("%w: sqlite path %q: give a file path (an in-memory database is one per connection)", fence.ErrInvalidArgument, path)
	case strings.IndexByte(path, 0) >= 0:
		return nil, fmt.Errorf("%w: sqlite path %q contains a NUL byte", fence.ErrInvalidArgument, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlfence: sqlite path %q: %w", path, err)
	}
	// A file: URI, so a '?' or '%' in the path is escaped rather than cut off.
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", SQLiteBusyTimeoutMS))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	u.RawQuery = q.Encode()
	return sql.Open("sqlite", u.String())
}

// probeResource is a fence row name no grant can present (fence refuses NUL bytes).
const probeResource = "\x00sqlfence:clientFoundRows probe"

// probeFoundRows checks once per Store that the MySQL pool reports matched rows: in
// a transaction that is always rolled back it writes the probe row and then writes it
// again unchanged, which reports 1 row with clientFoundRows and 0 without. A verdict
// is kept; an error that is not a verdict (ctx ended, network) is returned and the
// check runs again next time.
func (s *Store) probeFoundRows(ctx context.Context) error {
	if s.probeOK.Load() {
		return nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeE
	}
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlfence: check mysql connection: %w", err)
		}
		defer tx.Rollback()
		const q = "INSERT INTO fence_tokens (resource, token) VALUES (?, 1) ON DUPLICATE KEY UPDATE token = token"
		var n int64
		for range 2 {
			res, err := tx.ExecContext(ctx, q, probeResource)
			if missingSchema(err) {
				return fmt.Errorf("%w: check mysql connection: %w", fence.ErrSchema, err)
			}
			if err != nil {
				return fmt.Errorf("sqlfence: check mysql connection: %w", err)
			}
			if n, err = res.RowsAffected(); err != nil {
				return fmt.Errorf("sqlfence: check mysql connection: %w", err)
			}
		}
		var version string
		if err := tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
			return fmt.Errorf("sqlfence: check mysql connection: %w", err)
		}
		s.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
		if n == 0 {
			return fmt.Errorf("%w: rows changed are counted instead of rows matched, so a valid "+
				"write of unchanged values would look refused; add clientFoundRows=true to the DSN "+
				"(user:pass@tcp(host:3306)/db?clientFoundRows=true&interpolateParams=true) or open "+
				"the pool with sqlfence.OpenMySQL", ErrFoundRows)
		}
		return nil
	})
	if err == nil || errors.Is(err, ErrFoundRows) {
		s.probed, s.probeE = true, err
		s.probeOK.Store(err == nil)
	}
	return err
}
