package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/grant"
)

// On MariaDB a fenced transaction through a pool opened by OpenMySQL costs the round
// trips of an unfenced one: the pool's connections are wrapped so that the begin of a
// fenced transaction is one anonymous compound statement (BEGIN NOT ATOMIC ... END,
// one statement to the server) that sets the session's idle_transaction_timeout,
// starts the transaction and raises the fence row; and its COMMIT or ROLLBACK is one
// that also restores the timeout to the server's default. The compound's exit handler
// rolls back and restores the timeout before it hands any error back, so a refused
// raise leaves the connection as it found it. A user's own transactions on the same
// pool take the driver's path unchanged.

// mysqlConn is what the wrapper needs of the driver's connection: everything the
// go-sql-driver connection implements, so that wrapping hides none of it.
type mysqlConn interface {
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

// fastConnector wraps the go-sql-driver connector (OpenMySQL).
type fastConnector struct{ driver.Connector }

// fastDriver marks a pool whose connections are fastConns.
type fastDriver struct{ driver.Driver }

func (c fastConnector) Driver() driver.Driver { return fastDriver{c.Connector.Driver()} }

func (c fastConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	mc, ok := dc.(mysqlConn)
	if !ok {
		// Not the connection this was written for: a closed one, so the pool
		// never hands out a connection whose fenced begin would not raise.
		_ = dc.Close()
		return nil, errors.New("sqlfence: mysql driver connection lacks an interface the store needs")
	}
	return &fastConn{mysqlConn: mc}, nil
}

// fastConn is the driver's connection; its BeginTx runs a fastBegin carried by ctx.
type fastConn struct{ mysqlConn }

// fastBegin is the compound statement a fenced begin sends, and whether a fastConn
// sent it.
type fastBegin struct {
	query string
	args  []driver.NamedValue
	sent  bool
}

type fastBeginKey struct{}

func (c *fastConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, _ := ctx.Value(fastBeginKey{}).(*fastBegin)
	if b == nil {
		return c.mysqlConn.BeginTx(ctx, opts)
	}
	b.sent = true
	if _, err := c.ExecContext(ctx, b.query, b.args); err != nil {
		return nil, err
	}
	return fastTx{c}, nil
}

// fastTx ends a fenced transaction and restores the session's idle timeout in the
// same statement. Like the driver's own, it does not watch a context.
type fastTx struct{ c *fastConn }

const restoreIdle = "SET SESSION idle_transaction_timeout = DEFAULT"

func (t fastTx) Commit() error {
	_, err := t.c.ExecContext(context.Background(), "BEGIN NOT ATOMIC COMMIT; "+restoreIdle+"; END", nil)
	return err
}

func (t fastTx) Rollback() error {
	_, err := t.c.ExecContext(context.Background(), "BEGIN NOT ATOMIC ROLLBACK; "+restoreIdle+"; END", nil)
	return err
}

// staleMsg starts the message of the error the compound raises for a refused raise;
// the stored token follows it.
const staleMsg = "fencegate: stored fence token "

// fastBeginSQL sets the idle timeout, begins and raises the fence row: the bump of
// bumpSQL; if it matched nothing, the row is inserted unless present, read under
// lock, and refused (SIGNAL with the stored token) when higher, else raised.
// Arguments: fastBeginArgs.
const fastBeginSQL = "BEGIN NOT ATOMIC " +
	"DECLARE seen BIGINT DEFAULT NULL; " +
	"DECLARE msg VARCHAR(64); " +
	"DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; " + restoreIdle + "; RESIGNAL; END; " +
	"SET SESSION idle_transaction_timeout = ?; " +
	"START TRANSACTION; " +
	"UPDATE fence_tokens SET token = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE resource = ? AND token <= ?; " +
	"IF ROW_COUNT() = 0 THEN " +
	"INSERT INTO fence_tokens (resource, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE resource = resource; " +
	"SELECT token INTO seen FROM fence_tokens WHERE resource = ? FOR UPDATE; " +
	"IF seen > ? THEN SET msg = CONCAT('" + staleMsg + "', seen); " +
	"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg; " +
	"ELSEIF seen < ? THEN UPDATE fence_tokens SET token = ?, updated_at = CURRENT_TIMESTAMP(6) WHERE resource = ?; " +
	"END IF; END IF; END"

func fastBeginArgs(g fence.Grant, idleSecs int64) []driver.NamedValue {
	tok, res := int64(g.Token()), g.Resource()
	vals := []any{idleSecs, tok, res, tok, res, tok, res, tok, tok, tok, res}
	args := make([]driver.NamedValue, len(vals))
	for i, v := range vals {
		args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return args
}

// fast reports whether Fenced can take the one-statement begin: MariaDB, a pool
// opened by OpenMySQL, the server's default transaction options, a single grant.
func (s *Store) fast(g fence.Grant) bool {
	if grant.Multi(g) || !s.mariadb || s.txOpts != nil {
		return false
	}
	_, ok := s.db.Driver().(fastDriver)
	return ok
}

// fencedFast is Fenced on MariaDB through an OpenMySQL pool (see fastConn).
func (s *Store) fencedFast(ctx context.Context, g fence.Grant, fn func(*sql.Tx) error) error {
	b := &fastBegin{query: fastBeginSQL, args: fastBeginArgs(g, idleSecs(s, g))}
	bctx := context.WithValue(ctx, fastBeginKey{}, b)
	var tx *sql.Tx
	err := s.retry(ctx, func() error {
		var err error
		tx, err = s.db.BeginTx(bctx, nil)
		switch {
		case err != nil:
			return fastBeginErr(g, err)
		case !b.sent:
			_ = tx.Rollback()
			return errors.New("sqlfence: the pool's connection did not raise the fence row")
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.finish(ctx, tx, g, fn)
}

func idleSecs(s *Store, g fence.Grant) int64 {
	return int64(math.Ceil(grant.IdleTimeout(g, s.idle).Seconds()))
}

// fastBeginErr turns the compound's refusal into a *fence.StaleError.
func fastBeginErr(g fence.Grant, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.SQLState == [5]byte{'4', '5', '0', '0', '0'} && strings.HasPrefix(me.Message, staleMsg) {
		if seen, perr := strconv.ParseInt(strings.TrimPrefix(me.Message, staleMsg), 10, 64); perr == nil {
			return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: fence.Token(seen)}
		}
	}
	return raiseErr(g, err)
}
