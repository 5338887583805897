package sqlfence

import (
	"context"
	"database/sql"
	"runtime"
	"strings"
	"sync"

	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// shape is Decrement's SQL for one counter shape (table, counter column, key columns
// in order), checked and built once: the guarded take and the look-up that explains a
// take that changed nothing.
type shape struct {
	take, look string
	// stmt is take prepared on the Store's *sql.DB (see database.prepares).
	// database/sql prepares it again on each pooled connection it runs on, and the
	// database prepares it again itself after the table is dropped, re-created or
	// altered (SQLite's sqlite3_prepare_v2, MySQL's automatic re-prepare). Nil on
	// PostgreSQL, and when preparing failed: the take then runs as text, and the
	// next call prepares again.
	stmt *sql.Stmt
}

// exec runs sh's take: prepared, or as text on db.
func (sh *shape) exec(ctx context.Context, db *sql.DB, args []any) (sql.Result, error) {
	if sh.stmt != nil {
		return sh.stmt.ExecContext(ctx, args...)
	}
	return db.ExecContext(ctx, sh.take, args...)
}

// queryRow runs sh's take for the row it returns.
func (sh *shape) queryRow(ctx context.Context, db *sql.DB, args []any) *sql.Row {
	if sh.stmt != nil {
		return sh.stmt.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, sh.take, args...)
}

// shapeCache is a Store's shapes (engine.ShapeMap, keyed by appendShapeKey) and the
// statements prepared for them.
//
// Statements are closed by a cleanup once the Store is unreachable, or with their
// connections by db.Close; a take on a closed *sql.DB fails with database/sql's
// "sql: database is closed", prepared or not. Store has no Close of its own.
type shapeCache struct {
	m     engine.ShapeMap[*shape]
	mu    sync.Mutex // guards stmts
	stmts *stmtList  // nil until the first statement is prepared
}

// stmtList holds a Store's prepared statements apart from the Store, so the cleanup
// that closes them does not keep the Store alive. Without it a program that makes a
// Store per request would keep every statement until db.Close.
type stmtList struct {
	mu   sync.Mutex
	list []*sql.Stmt
}

func (l *stmtList) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, st := range l.list {
		st.Close() // nobody to tell: the Store is gone
	}
	l.list = nil
}

// appendShapeKey appends c's shape to buf: the table, the counter column and the key
// columns, each by engine.AppendShapeName.
func appendShapeKey(buf []byte, c nolock.Counter) []byte {
	buf = engine.AppendShapeName(buf, c.Table)
	buf = engine.AppendShapeName(buf, c.Column)
	for _, k := range c.Key {
		buf = engine.AppendShapeName(buf, k.Name)
	}
	return buf
}

// shapeOf returns c's shape: the cached one, or checked and built now and cached
// below the bound. A counter that fails the checks is never cached, so it fails on
// every call with the same error.
func (s *Store) shapeOf(ctx context.Context, c nolock.Counter) (*shape, error) {
	var buf [128]byte // the key stays on the stack for names of ordinary length
	key := appendShapeKey(buf[:0], c)
	sh, _ := s.shapes.m.Load(key)
	if sh != nil && (sh.stmt != nil || !s.d.prepares()) {
		return sh, nil
	}
	if sh == nil {
		ct, err := engine.CheckCounter(s.d.dialect(), c)
		if err != nil {
			return nil, err
		}
		where := strings.Join(ct.Keys, " = ? AND ") + " = ?"
		sh = &shape{
			take: s.d.decrementSQL(ct.Table, ct.Column, where),
			look: s.d.rebind("SELECT " + ct.Column + " FROM " + ct.Table + " WHERE " + where),
		}
	}
	return s.remember(ctx, key, sh), nil
}

// remember caches sh under key, first preparing its take where the dialect prepares
// takes (database.prepares), and returns the shape to use: the one cached, or sh
// when the cache is full. A cached shape whose prepare failed is replaced once a
// prepare succeeds.
func (s *Store) remember(ctx context.Context, key []byte, sh *shape) *shape {
	c := &s.shapes
	if _, ok := c.m.Load(key); !ok && c.m.Full() {
		return sh // nothing would be kept: do not prepare
	}
	v := sh
	if s.d.prepares() {
		// A failure is not kept: the take runs as text and reports it, the next
		// call tries again.
		if st, err := s.db.PrepareContext(ctx, sh.take); err == nil {
			v = &shape{take: sh.take, look: sh.look, stmt: st} // sh may be shared: copy
		}
	}
	kept, ok := c.m.Store(string(key), v, func(old *shape) bool { return old.stmt == nil && v.stmt != nil })
	if v.stmt != nil {
		if !ok || kept != v {
			v.stmt.Close() // never handed out
		} else {
			c.keep(s, v.stmt)
		}
	}
	if !ok {
		return sh
	}
	return kept
}

// keep adds st to the statements closed once s is unreachable.
func (c *shapeCache) keep(s *Store, st *sql.Stmt) {
	c.mu.Lock()
	if c.stmts == nil {
		c.stmts = &stmtList{}
		runtime.AddCleanup(s, (*stmtList).close, c.stmts)
	}
	c.mu.Unlock()
	c.stmts.mu.Lock()
	c.stmts.list = append(c.stmts.list, st)
	c.stmts.mu.Unlock()
}
