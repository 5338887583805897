// Package sqlite opens SQLite databases for sqlfence through modernc.org/sqlite (pure
// Go, driver name "sqlite"), in a package of its own so that a program on another
// database links no SQLite.
//
//	db, err := sqlite.Open("app.db")
//	...
//	store, err := sqlfence.New(db, migrations.SQLite)
package sqlite

import (
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver Open opens

	"github.com/fencegate/fencegate/fence"
)

// Open opens the SQLite database file at path (created if missing) for concurrent
// writers from many goroutines and processes: WAL (readers do not block the writer),
// a busy timeout of 5 seconds (how long a statement waits for another connection's
// write lock; a Store retries past it until its ctx ends), synchronous=NORMAL
// (durable at checkpoints, safe from corruption, as SQLite recommends with WAL) and
// BEGIN IMMEDIATE (a transaction takes the write lock at begin, so a fenced one holds
// its fence from its first statement). Like sql.Open it does no I/O. path is a file
// name: an empty path, ":memory:" (each pooled connection would get its own empty
// database), a "file:" URI and a NUL byte are errors wrapping fence.ErrInvalidArgument.
func Open(path string) (*sql.DB, error) {
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
		return nil, fmt.Errorf("sqlfence/sqlite: path %q: %w", path, err)
	}
	// A file: URI, so a '?' or '%' in the path is escaped rather than cut off.
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	u.RawQuery = q.Encode()
	return sql.Open("sqlite", u.String())
}
