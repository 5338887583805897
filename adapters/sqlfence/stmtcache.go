package sqlfence

import (
	"context"
	"database/sql"
	"encoding/binary"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/fencegate/fencegate/fence"
)

// maxShapes bounds the counter shapes a Store keeps built. Programs name their
// counters in code, so they have a few; past the bound Decrement builds its SQL on
// every call and prepares nothing. Nothing is evicted: a caller may be using it.
const maxShapes = 256

// shape is Decrement's SQL for one counter shape (table, counter column, key columns
// in order), checked and built once: the guarded take and the look-up that explains a
// take that changed nothing.
type shape struct {
	take, look string
	// stmt is take prepared on the Store's *sql.DB (see Dialect.preparesTake).
	// database/sql prepares it again on each pooled connection it runs on, and the
	// database prepares it again itself after the table is dropped, re-created or
	// altered (SQLite's sqlite3_prepare_v2, MySQL's automatic re-prepare). Nil on
	// PostgreSQL, and when preparing failed: the take then runs as text, and the
	// next call prepares again.
	stmt *sql.Stmt
}

// preparesTake reports whether Decrement runs its take as a prepared statement. SQLite:
// modernc parses every statement text anew, about a quarter of a take. MySQL: a
// prepared statement runs in the binary protocol, measured 1.2 x the interpolated text
// of OpenMySQL at 16 workers (BENCHMARKS.md), at the price of one prepare per pooled
// connection and shape, the first time. Not PostgreSQL: pgx's stdlib already keeps
// statements prepared per connection by their text.
func (d Dialect) preparesTake() bool { return d == SQLite || d == MySQL }

// shapeCache maps a shape key (appendShapeKey) to its shape. Readers load an
// immutable map and take no lock; a writer copies it, at most maxShapes times per
// Store.
//
// Statements are closed by a cleanup once the Store is unreachable, or with their
// connections by db.Close; a take on a closed *sql.DB fails with database/sql's
// "sql: database is closed", prepared or not. Store has no Close of its own.
type shapeCache struct {
	m     atomic.Pointer[map[string]*shape]
	mu    sync.Mutex // writers
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

// appendShapeKey appends c's shape to buf, each name as its length and its bytes.
// The lookup runs before any check, so the key must be unambiguous for any names:
// with plain separators an invalid name holding one could find a valid shape.
func appendShapeKey(buf []byte, c fence.Counter) []byte {
	buf = appendName(buf, c.Table)
	buf = appendName(buf, c.Column)
	for _, k := range c.Key {
		buf = appendName(buf, k.Name)
	}
	return buf
}

func appendName(buf []byte, name string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(name))), name...)
}

// shapeOf returns c's shape: the cached one, or checked and built now and cached
// below the bound. A counter that fails the checks is never cached, so it fails on
// every call with the same error.
func (s *Store) shapeOf(ctx context.Context, c fence.Counter) (*shape, error) {
	var buf [128]byte // the key stays on the stack for names of ordinary length
	key := appendShapeKey(buf[:0], c)
	var sh *shape
	if m := s.shapes.m.Load(); m != nil {
		sh = (*m)[string(key)] // indexing with string(bytes) does not allocate
	}
	if sh != nil && (sh.stmt != nil || !s.d.preparesTake()) {
		return sh, nil
	}
	if sh == nil {
		qt, col, where, err := s.counter(c)
		if err != nil {
			return nil, err
		}
		sh = &shape{
			take: s.d.decrementSQL(qt, col, where),
			look: s.d.rebind("SELECT " + col + " FROM " + qt + " WHERE " + where),
		}
	}
	return s.remember(ctx, string(key), sh), nil
}

// remember caches sh under key, first preparing its take where the dialect prepares
// takes (Dialect.preparesTake), and returns the
// shape to use: sh, or the one another caller cached first. A cached shape whose
// prepare failed is replaced once a prepare succeeds. A full cache keeps nothing new.
func (s *Store) remember(ctx context.Context, key string, sh *shape) *shape {
	c := &s.shapes
	if m := c.m.Load(); m != nil && len(*m) >= maxShapes && (*m)[key] == nil {
		return sh
	}
	var st *sql.Stmt
	if s.d.preparesTake() {
		// Outside c.mu: preparing may wait for a pooled connection. A failure is
		// not kept: the take runs as text and reports it, the next call tries again.
		st, _ = s.db.PrepareContext(ctx, sh.take)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]*shape
	if m := c.m.Load(); m != nil {
		old = *m
	}
	have := old[key]
	if (have != nil && (have.stmt != nil || st == nil)) || (have == nil && len(old) >= maxShapes) {
		if st != nil {
			st.Close() // never handed out
		}
		if have != nil {
			return have
		}
		return sh
	}
	if st != nil {
		sh = &shape{take: sh.take, look: sh.look, stmt: st} // sh may be shared: copy
		if c.stmts == nil {
			c.stmts = &stmtList{}
			runtime.AddCleanup(s, (*stmtList).close, c.stmts)
		}
		c.stmts.mu.Lock()
		c.stmts.list = append(c.stmts.list, st)
		c.stmts.mu.Unlock()
	}
	next := make(map[string]*shape, len(old)+1)
	maps.Copy(next, old)
	next[key] = sh
	c.m.Store(&next)
	return sh
}
