package sqlfence

import (
	"context"
	"database/sql"
	"runtime"
	"sync"

	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/nolock"
)

// shape is Decrement's SQL for one counter shape (table, column, key columns), built
// once: the guarded take, and the look-up that explains a take that changed nothing.
type shape struct {
	take, look string
	// stmt is take prepared on the *sql.DB (database.prepares); nil where nothing is
	// prepared or preparing failed: the take runs as text, the next call prepares again.
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

// shapeCache is a Store's shapes; a cleanup closes their statements once the Store is
// unreachable (Store has no Close).
type shapeCache struct {
	m     dialect.ShapeMap[*shape]
	once  sync.Once
	stmts *stmtList
}

// stmtList holds the statements apart from the Store, so the cleanup closing them does
// not keep the Store alive.
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

// shapeOf returns c's shape, cached or built now (prepared where the database
// prepares) and cached below the bound. A counter failing the checks is never cached;
// a cached shape whose prepare failed is replaced once one succeeds.
func (s *Store) shapeOf(ctx context.Context, c nolock.Counter) (*shape, error) {
	var buf [128]byte // the key stays on the stack for names of ordinary length
	key := dialect.AppendShapeName(dialect.AppendShapeName(buf[:0], c.Table), c.Column)
	for _, k := range c.Key {
		key = dialect.AppendShapeName(key, k.Name)
	}
	cached, _ := s.shapes.m.Load(key)
	if cached != nil && (cached.stmt != nil || !s.d.prepares()) {
		return cached, nil
	}
	ct, err := dialect.CheckCounter(s.d.dialect(), c)
	if err != nil {
		return nil, err
	}
	where := eqs("", ct.Keys, " AND ")
	sh := &shape{
		take: s.d.rebind(s.d.decrementSQL(ct.Table, ct.Column, where)),
		look: s.d.rebind("SELECT " + ct.Column + " FROM " + ct.Table + " WHERE " + where),
	}
	if cached == nil && s.shapes.m.Full() {
		return sh, nil // nothing would be kept: do not prepare
	}
	if s.d.prepares() {
		sh.stmt, _ = s.db.PrepareContext(ctx, sh.take) // a failure: the take runs as text and reports it
	}
	kept, ok := s.shapes.m.Store(string(key), sh, func(old *shape) bool { return old.stmt == nil && sh.stmt != nil })
	switch {
	case sh.stmt == nil:
	case !ok || kept != sh:
		sh.stmt.Close() // never handed out
		sh.stmt = nil
	default:
		s.shapes.once.Do(func() {
			s.shapes.stmts = &stmtList{}
			runtime.AddCleanup(s, (*stmtList).close, s.shapes.stmts)
		})
		s.shapes.stmts.mu.Lock()
		s.shapes.stmts.list = append(s.shapes.stmts.list, sh.stmt)
		s.shapes.stmts.mu.Unlock()
	}
	return kept, nil
}
