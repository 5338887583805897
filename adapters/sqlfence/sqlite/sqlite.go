// Package sqlite opens SQLite databases for sqlfence through modernc.org/sqlite (pure
// Go, driver "sqlite"), apart so a program on another database links no SQLite.
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

// Open opens the SQLite file at path (created if missing) for concurrent writers,
// goroutines and processes: WAL (readers do not block the writer), a 5 s busy timeout
// (a Store retries past it until ctx ends), synchronous=NORMAL (durable at checkpoints,
// safe from corruption, as SQLite recommends with WAL) and BEGIN IMMEDIATE (the write
// lock taken at begin, so a fenced transaction holds its fence from its first
// statement). Like sql.Open it does no I/O. An empty path, ":memory:" (a database per
// pooled connection), a "file:" URI or a NUL byte is fence.ErrInvalidArgument.
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
	// A file: URI, so a '?' or '%' in the path is escaped, not cut off.
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	u.RawQuery = q.Encode()
	return sql.Open("sqlite", u.String())
}
