package sqlfence

import (
	"context"
	"database/sql"
	"runtime"
	"sync"

	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// shape is Decrement's SQL for one counter shape (table, counter column, key columns
// in order), checked and built once: the guarded take, and the look-up that explains
// a take that changed nothing.
type shape struct {
	take, look string
	// stmt is take prepared on the Store's *sql.DB (database.prepares), which
	// database/sql prepares again per pooled connection, and the database again
	// after the table changes. Nil where nothing is prepared or preparing failed: the
	// take runs as text and the next call prepares again.
	stmt *sql.Stmt
}

func (sh *shape) exec(ctx context.Context, db *sql.DB, args []any) (sql.Result, error) {
	if sh.stmt != nil {
		return sh.stmt.ExecContext(ctx, args...)
	}
	return db.ExecContext(ctx, sh.take, args...)
}

func (sh *shape) queryRow(ctx context.Context, db *sql.DB, args []any) *sql.Row {
	if sh.stmt != nil {
		return sh.stmt.QueryRowContext(ctx, args...)
	}
	return db.QueryRowContext(ctx, sh.take, args...)
}

// shapeCache is a Store's shapes and their prepared statements, which a cleanup
// closes once the Store is unreachable (db.Close closes them too; Store has no Close).
type shapeCache struct {
	m     engine.ShapeMap[*shape]
	once  sync.Once
	stmts *stmtList
}

// stmtList holds the statements apart from the Store, so that the cleanup that
// closes them does not keep the Store alive (a Store per request would otherwise
// keep every statement until db.Close).
type stmtList struct {
	mu   sync.Mutex
	list []*sql.Stmt
}

func (l *stmtList) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, st := range l.list {
		st.Close()
	}
	l.list = nil
}

// shapeOf returns c's shape: the cached one, or checked and built now and cached
// below the bound. A counter that fails the checks is never cached, so it fails on
// every call with the same error.
func (s *Store) shapeOf(ctx context.Context, c nolock.Counter) (*shape, error) {
	var buf [128]byte // the key stays on the stack for names of ordinary length
	key := engine.AppendShapeName(engine.AppendShapeName(buf[:0], c.Table), c.Column)
	for _, k := range c.Key {
		key = engine.AppendShapeName(key, k.Name)
	}
	sh, _ := s.shapes.m.Load(key)
	if sh != nil && (sh.stmt != nil || !s.d.prepares()) {
		return sh, nil
	}
	if sh == nil {
		ct, err := engine.CheckCounter(s.d.dialect(), c)
		if err != nil {
			return nil, err
		}
		where := whereKeys(ct.Keys)
		sh = &shape{
			take: s.d.rebind(s.d.decrementSQL(ct.Table, ct.Column, where)),
			look: s.d.rebind("SELECT " + ct.Column + " FROM " + ct.Table + " WHERE " + where),
		}
	}
	return s.remember(ctx, key, sh), nil
}

// remember caches sh under key, its take prepared first where the database
// prepares, and returns the shape to use: the one cached, or sh when the cache is
// full. A cached shape whose prepare failed is replaced once one succeeds.
func (s *Store) remember(ctx context.Context, key []byte, sh *shape) *shape {
	c := &s.shapes
	if _, ok := c.m.Load(key); !ok && c.m.Full() {
		return sh // nothing would be kept: do not prepare
	}
	v := sh
	if s.d.prepares() {
		// A failure is not kept: the take runs as text and reports it.
		if st, err := s.db.PrepareContext(ctx, sh.take); err == nil {
			v = &shape{take: sh.take, look: sh.look, stmt: st} // sh may be shared: copy
		}
	}
	kept, ok := c.m.Store(string(key), v, func(old *shape) bool { return old.stmt == nil && v.stmt != nil })
	switch {
	case v.stmt == nil:
	case !ok || kept != v:
		v.stmt.Close() // never handed out
	default:
		c.once.Do(func() {
			c.stmts = &stmtList{}
			runtime.AddCleanup(s, (*stmtList).close, c.stmts)
		})
		c.stmts.mu.Lock()
		c.stmts.list = append(c.stmts.list, v.stmt)
		c.stmts.mu.Unlock()
	}
	if !ok {
		return sh
	}
	return kept
}
