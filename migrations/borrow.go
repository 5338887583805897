package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
)

// borrow returns a *sql.DB whose only connection is c, a driver connection borrowed
// from the caller's pool through (*sql.Conn).Raw. Closing it does not close c: the
// caller's *sql.DB gets its connection back when Raw returns.
//
// golang-migrate's database drivers close the *sql.DB they are given (and the pgx v5
// driver has no way to be given a connection instead), so Up cannot hand them the
// caller's own *sql.DB.
func borrow(c any) (*sql.DB, error) {
	dc, ok := c.(driver.Conn)
	if !ok {
		return nil, fmt.Errorf("migrations: driver connection %T is not a database/sql/driver.Conn", c)
	}
	return sql.OpenDB(&borrowedConnector{conn: dc}), nil
}

var errSecondConn = errors.New("migrations: golang-migrate asked for a second connection while running on one borrowed connection")

type borrowedConnector struct {
	mu   sync.Mutex
	conn driver.Conn
	used bool
}

// Connect hands out the borrowed connection once. A second request (the first one
// busy or discarded as bad) is an error rather than a wait that could never end.
func (b *borrowedConnector) Connect(context.Context) (driver.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used {
		return nil, errSecondConn
	}
	b.used = true
	return borrowedConn{b.conn}, nil
}

func (b *borrowedConnector) Driver() driver.Driver { return borrowedDriver{} }

type borrowedDriver struct{}

func (borrowedDriver) Open(string) (driver.Conn, error) { return nil, errSecondConn }

// borrowedConn forwards every optional interface database/sql looks for, so the
// borrowed connection behaves as it does in the caller's pool (multi-statement Exec
// without a prepare, BeginTx with options, Ping), and ignores Close.
type borrowedConn struct{ c driver.Conn }

var (
	_ driver.Conn               = borrowedConn{}
	_ driver.ConnBeginTx        = borrowedConn{}
	_ driver.ConnPrepareContext = borrowedConn{}
	_ driver.ExecerContext      = borrowedConn{}
	_ driver.QueryerContext     = borrowedConn{}
	_ driver.Pinger             = borrowedConn{}
	_ driver.NamedValueChecker  = borrowedConn{}
	_ driver.SessionResetter    = borrowedConn{}
	_ driver.Validator          = borrowedConn{}
)

func (b borrowedConn) Prepare(query string) (driver.Stmt, error) { return b.c.Prepare(query) }

// Close leaves the connection open: it belongs to the caller's pool.
func (b borrowedConn) Close() error { return nil }

// Begin is forwarded for drivers without ConnBeginTx.
func (b borrowedConn) Begin() (driver.Tx, error) { return b.c.Begin() }

func (b borrowedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if bt, ok := b.c.(driver.ConnBeginTx); ok {
		return bt.BeginTx(ctx, opts)
	}
	if opts.Isolation != 0 || opts.ReadOnly {
		return nil, errors.New("migrations: driver does not support transaction options")
	}
	return b.c.Begin()
}

func (b borrowedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := b.c.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return b.c.Prepare(query)
}

func (b borrowedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if e, ok := b.c.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (b borrowedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if q, ok := b.c.(driver.QueryerContext); ok {
		return q.QueryContext(ctx, query, args)
	}
	return nil, driver.ErrSkip
}

func (b borrowedConn) Ping(ctx context.Context) error {
	if p, ok := b.c.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (b borrowedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := b.c.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (b borrowedConn) ResetSession(ctx context.Context) error {
	if r, ok := b.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (b borrowedConn) IsValid() bool {
	if v, ok := b.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
