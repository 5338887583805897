// Package mysql opens MySQL and MariaDB pools for sqlfence through go-sql-driver/mysql,
// in a package of its own so a program on another database links no MySQL driver.
//
//	db, err := mysql.Open("app:secret@tcp(127.0.0.1:3306)/billing")
//	...
//	store, err := sqlfence.New(db, migrations.MySQL)
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/fencegate/fencegate/adapters/sqlfence/internal/fastbegin"
	"github.com/fencegate/fencegate/fence"
)

// Open opens a pool for a Store: dsn, parsed by the driver's ParseDSN, with
// clientFoundRows=true (which a Store needs) and interpolateParams=true (one round trip
// per statement; left off for collations the driver will not interpolate, such as
// sjis). A DSN the driver refuses is an error wrapping fence.ErrInvalidArgument and
// the driver's error. Like sql.Open it does no I/O; the pool keeps 2 idle connections
// (call SetMaxIdleConns under concurrent load).
//
// On MariaDB a fenced transaction then costs an unfenced one's round trips (see
// sqlfence.WithIdleTimeout): the driver's connections are wrapped, every interface
// kept, though sql.Conn.Raw hands out the wrapper; the caller's own transactions are
// unchanged.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: mysql dsn: %w", fence.ErrInvalidArgument, err)
	}
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		// Multi-byte collations whose encoding can hide a quote (sjis, gbk): prepare.
		cfg.InterpolateParams = false
		conn, err = gomysql.NewConnector(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: mysql dsn: %w", fence.ErrInvalidArgument, err)
	}
	if cfg.InterpolateParams {
		// The one-statement fenced begin sends its arguments interpolated.
		return sql.OpenDB(fastConnector{conn}), nil
	}
	return sql.OpenDB(conn), nil
}

// driverConn is every interface the driver's connection implements: wrapping hides none.
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
}

// fastConnector's Driver tells sqlfence that the connections honour a fastbegin.Begin.
type fastConnector struct{ driver.Connector }

func (c fastConnector) Driver() driver.Driver { return fastbegin.Driver{Driver: c.Connector.Driver()} }

func (c fastConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	mc, ok := dc.(driverConn)
	if !ok {
		// Never hand out a connection whose fenced begin would not raise.
		_ = dc.Close()
		return nil, errors.New("sqlfence/mysql: driver connection lacks an interface the store needs")
	}
	return &fastConn{driverConn: mc}, nil
}

// fastConn's BeginTx sends the fastbegin.Begin that ctx carries.
type fastConn struct{ driverConn }

func (c *fastConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b := fastbegin.From(ctx)
	if b == nil {
		return c.driverConn.BeginTx(ctx, opts)
	}
	b.Sent = true
	if _, err := c.ExecContext(ctx, b.Query, b.Args); err != nil {
		return nil, err
	}
	return fastTx{c: c, b: b}, nil
}

// fastTx ends a fenced transaction with the Begin's statements; like the driver's, it
// watches no context.
type fastTx struct {
	c *fastConn
	b *fastbegin.Begin
}

func (t fastTx) Commit() error   { return t.send(t.b.Commit) }
func (t fastTx) Rollback() error { return t.send(t.b.Rollback) }

func (t fastTx) send(q string) error {
	_, err := t.c.ExecContext(context.Background(), q, nil)
	return err
}
