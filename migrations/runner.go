package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Up and Down keep their version the way golang-migrate's drivers do (one row,
// version and dirty, in migrationsTable; the same advisory locks), so that either can
// run after the other; running them here keeps golang-migrate and its database
// drivers out of the programs and go.sum files of the library's users.

// migration is one numbered step of a dialect's folder.
type migration struct {
	version  int64
	up, down string // file names
}

func steps(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	byVersion := map[int64]*migration{}
	for _, name := range names {
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migrations: file %q does not start with a version", name)
		}
		m := byVersion[v]
		if m == nil {
			m = &migration{version: v}
			byVersion[v] = m
		}
		switch {
		case strings.HasSuffix(rest, ".up.sql"):
			m.up = name
		case strings.HasSuffix(rest, ".down.sql"):
			m.down = name
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// sqliteBusyTimeout is how long, in milliseconds, Up waits for another writer of a
// SQLite database.
const sqliteBusyTimeout = 30_000

// migrator runs one dialect's steps on one borrowed connection.
type migrator struct {
	d    Dialect
	conn *sql.Conn
	fsys fs.FS
	inTx bool // SQLite: the whole run is one transaction on conn
}

// advisoryLockID is golang-migrate's GenerateAdvisoryLockId: the CRC-32 of the names
// joined by NUL bytes, the database's name last, times a salt.
func advisoryLockID(dbName string, names ...string) string {
	s := strings.Join(append(names, dbName), "\x00")
	return strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(s))*uint32(1486364155)), 10)
}

// lock takes the lock golang-migrate takes for the same table, so that two runs (of
// Up, or of Up and golang-migrate) never interleave. It returns the unlock.
func (m *migrator) lock(ctx context.Context) (func(), error) {
	switch m.d {
	case Postgres:
		var db, schema string
		if err := m.conn.QueryRowContext(ctx, `SELECT current_database(), current_schema()`).Scan(&db, &schema); err != nil {
			return nil, err
		}
		id := advisoryLockID(db, schema, migrationsTable)
		if _, err := m.conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, id); err != nil {
			return nil, err
		}
		return func() { _, _ = m.conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, id) }, nil
	case MySQL:
		var db sql.NullString
		if err := m.conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db); err != nil {
			return nil, err
		}
		id := advisoryLockID(db.String + ":" + migrationsTable)
		for {
			var got sql.NullInt64
			if err := m.conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 10)`, id).Scan(&got); err != nil {
				return nil, err
			}
			if got.Int64 == 1 {
				return func() { _, _ = m.conn.ExecContext(context.Background(), `SELECT RELEASE_LOCK(?)`, id) }, nil
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
	}
	// SQLite: the whole run is one IMMEDIATE transaction (SQLite's DDL is
	// transactional), which takes the write lock first: a concurrent run waits for
	// it, up to a busy timeout set on this connection only while Up runs (a pool's
	// DSN often sets none, and then SQLite fails at once).
	var was int64
	if err := m.conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&was); err != nil {
		return nil, err
	}
	restore := func() {}
	if was < sqliteBusyTimeout {
		if _, err := m.conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.Itoa(sqliteBusyTimeout)); err != nil {
			return nil, err
		}
		restore = func() {
			_, _ = m.conn.ExecContext(context.Background(), "PRAGMA busy_timeout = "+strconv.FormatInt(was, 10))
		}
	}
	if _, err := m.conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		restore()
		return nil, err
	}
	m.inTx = true
	return func() {
		_, _ = m.conn.ExecContext(context.Background(), `ROLLBACK`) // a no-op after COMMIT
		restore()
	}, nil
}

func (m *migrator) ensureTable(ctx context.Context) error {
	var q string
	switch m.d {
	case Postgres:
		q = `CREATE TABLE IF NOT EXISTS ` + migrationsTable + ` (version bigint not null primary key, dirty boolean not null)`
	case MySQL:
		q = "CREATE TABLE IF NOT EXISTS `" + migrationsTable + "` (version bigint not null primary key, dirty boolean not null)"
	case SQLite:
		q = `CREATE TABLE IF NOT EXISTS ` + migrationsTable + ` (version uint64,dirty bool);
CREATE UNIQUE INDEX IF NOT EXISTS version_unique ON ` + migrationsTable + ` (version)`
	}
	_, err := m.conn.ExecContext(ctx, q)
	return err
}

// version returns the recorded version (0: none) and whether it is dirty.
func (m *migrator) version(ctx context.Context) (int64, bool, error) {
	var v int64
	var dirty bool
	err := m.conn.QueryRowContext(ctx, `SELECT version, dirty FROM `+migrationsTable+` LIMIT 1`).Scan(&v, &dirty)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return v, dirty, err
}

type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// setVersion records v (0: no version) as golang-migrate does: one row or none.
func (m *migrator) setVersion(ctx context.Context, x execer, v int64, dirty bool) error {
	if _, err := x.ExecContext(ctx, `DELETE FROM `+migrationsTable); err != nil {
		return err
	}
	if v <= 0 && !dirty {
		return nil
	}
	q := `INSERT INTO ` + migrationsTable + ` (version, dirty) VALUES (?, ?)`
	if m.d == Postgres {
		q = `INSERT INTO ` + migrationsTable + ` (version, dirty) VALUES ($1, $2)`
	}
	_, err := x.ExecContext(ctx, q, v, dirty)
	return err
}

// apply runs one file and records to. On PostgreSQL both commit in one transaction
// and on SQLite inside the run's one transaction (their DDL is transactional: a
// failed step leaves nothing behind); MySQL commits DDL as it goes, so the version is
// marked dirty around the file, as golang-migrate does.
func (m *migrator) apply(ctx context.Context, file string, at, to int64) error {
	body, err := fs.ReadFile(m.fsys, file)
	if err != nil {
		return err
	}
	if m.inTx {
		if _, err := m.conn.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return m.setVersion(ctx, m.conn, to, false)
	}
	if m.d == MySQL {
		if err := m.setVersion(ctx, m.conn, at, true); err != nil {
			return err
		}
		if _, err := m.conn.ExecContext(ctx, string(body)); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return m.setVersion(ctx, m.conn, to, false)
	}
	tx, err := m.conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := m.setVersion(ctx, tx, to, false); err != nil {
		return err
	}
	return tx.Commit()
}

// run brings the schema up (or down) one step at a time, stopping between steps when
// ctx ends.
func (m *migrator) run(ctx context.Context, up bool) error {
	all, err := steps(m.fsys)
	if err != nil {
		return err
	}
	unlock, err := m.lock(ctx)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer unlock()
	if err := m.ensureTable(ctx); err != nil {
		return fmt.Errorf("create %s: %w", migrationsTable, err)
	}
	cur, dirty, err := m.version(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	if dirty {
		return fmt.Errorf("%w: %s version %d in %s", ErrDirty, m.d, cur, migrationsTable)
	}
	if !up {
		sort.Slice(all, func(i, j int) bool { return all[i].version > all[j].version })
	}
	for i, s := range all {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case up && s.version > cur:
			err = m.apply(ctx, s.up, s.version, s.version)
		case !up && s.version <= cur:
			prev := int64(0)
			if i+1 < len(all) {
				prev = all[i+1].version
			}
			err = m.apply(ctx, s.down, s.version, prev)
		default:
			continue
		}
		if err != nil {
			return err
		}
	}
	if m.inTx {
		if _, err := m.conn.ExecContext(ctx, `COMMIT`); err != nil {
			return err
		}
	}
	return nil
}
