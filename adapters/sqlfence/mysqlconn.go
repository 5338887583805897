package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/adapters/sqlfence/internal/fastbegin"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/mysqlsql"
)

// fenced: on MariaDB through a sqlfence/mysql pool (internal/fastbegin) one compound
// statement sets idle_transaction_timeout, begins and raises, and one commits or rolls
// back and restores it; on error its handler rolls back and restores. Otherwise the
// transaction runs on a pinned connection (fencedPinned).
func (mysql) fenced(ctx context.Context, s *Store, g *grant.Checked, fn func(*sql.Tx) error) error {
	if !g.Multi() && s.mariadb && s.txOpts == nil {
		if _, ok := s.db.Driver().(fastbegin.Driver); ok {
			return s.fencedFast(ctx, g, fn)
		}
	}
	return s.fencedPinned(ctx, g, fn)
}

const restoreIdle = "SET SESSION idle_transaction_timeout = DEFAULT"

// staleMsg starts the compound's refusal message, before the stored token.
const staleMsg = "fencegate: stored fence token "

// fastBeginSQL sets the idle timeout, begins and raises as mysql.raise does: mysqlsql's
// bump, else its upsert, whose refusal (the stored token as LAST_INSERT_ID, reset to 0
// before) is signalled with that token. Arguments: fastBeginArgs.
const fastBeginSQL = "BEGIN NOT ATOMIC " +
	"DECLARE seen BIGINT DEFAULT 0; " +
	"DECLARE msg VARCHAR(64); " +
	"DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; " + restoreIdle + "; RESIGNAL; END; " +
	"SET SESSION idle_transaction_timeout = ?; " +
	"START TRANSACTION; " +
	mysqlsql.BumpSQL + "; " +
	"IF ROW_COUNT() = 0 THEN " +
	"SET seen = LAST_INSERT_ID(0); " +
	mysqlsql.RaiseSQL + "; " +
	"SET seen = LAST_INSERT_ID(); " +
	"IF seen > 0 THEN SET msg = CONCAT('" + staleMsg + "', seen); " +
	"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = msg; " +
	"END IF; END IF; END"

// fastBeginArgs: the idle timeout, then BumpSQL's and RaiseSQL's arguments.
func fastBeginArgs(g fence.Grant, idleSecs int64) []driver.NamedValue {
	tok, res := int64(g.Token()), g.Resource()
	vals := []any{idleSecs, tok, res, tok, res, tok}
	args := make([]driver.NamedValue, len(vals))
	for i, v := range vals {
		args[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return args
}

func (s *Store) fencedFast(ctx context.Context, g *grant.Checked, fn func(*sql.Tx) error) error {
	b := &fastbegin.Begin{
		Query:    fastBeginSQL,
		Args:     fastBeginArgs(g, idleSecs(s, g)),
		Commit:   "BEGIN NOT ATOMIC COMMIT; " + restoreIdle + "; END",
		Rollback: "BEGIN NOT ATOMIC ROLLBACK; " + restoreIdle + "; END",
	}
	bctx := fastbegin.With(ctx, b)
	var tx *sql.Tx
	err := s.retry(ctx, func() (err error) {
		if tx, err = s.db.BeginTx(bctx, nil); err != nil {
			return s.fastBeginErr(g, err)
		}
		if !b.Sent {
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

// fastBeginErr turns the compound's refusal into a *fence.StaleError.
func (s *Store) fastBeginErr(g fence.Grant, err error) error {
	if me, ok := asMySQL(err); ok && me.SQLState == "45000" && strings.HasPrefix(me.Message, staleMsg) {
		if seen, perr := strconv.ParseInt(strings.TrimPrefix(me.Message, staleMsg), 10, 64); perr == nil {
			return stale(g, fence.Token(seen))
		}
	}
	return s.raiseErr(g, err)
}

// fencedPinned sets the session's idle timeout (MariaDB's idle_transaction_timeout,
// MySQL's wait_timeout) on a pinned connection before BEGIN, restored after.
func (s *Store) fencedPinned(ctx context.Context, g *grant.Checked, fn func(*sql.Tx) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlfence: get a connection: %w", err)
	}
	defer conn.Close()
	v := "wait_timeout"
	if s.mariadb {
		v = "idle_transaction_timeout"
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION "+v+" = ?", idleSecs(s, g)); err != nil {
		return fmt.Errorf("sqlfence: set %s: %w", v, err)
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION "+v+" = DEFAULT"); err != nil {
			// Never hand the pool a connection with a short timeout: discard it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return s.run(ctx, conn, g, fn)
}

func idleSecs(s *Store, g *grant.Checked) int64 {
	return int64(math.Ceil(g.IdleTimeout(s.set.Idle).Seconds()))
}

// errFoundRows refuses a pool that counts changed rows, not matched: a fenced write of
// unchanged values would look refused.
var errFoundRows = fmt.Errorf("%w: sqlfence: the mysql connection lacks clientFoundRows=true", fence.ErrInvalidArgument)

// probeResource is a fence row name no grant can present (fence refuses NUL bytes).
const probeResource = "\x00sqlfence:clientFoundRows probe"

// probeFoundRows checks once per Store that the pool reports matched rows; after an
// error other than the verdict (ctx, network) it checks again next time.
func (s *Store) probeFoundRows(ctx context.Context) error {
	if s.probeOK.Load() {
		return nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probeOK.Load() || s.probeE != nil {
		return s.probeE
	}
	err := s.retry(ctx, func() error { return s.foundRows(ctx) })
	if errors.Is(err, errFoundRows) {
		s.probeE = err
	}
	s.probeOK.Store(err == nil)
	return err
}

// foundRows writes the probe row twice, unchanged the second time (1 row with
// clientFoundRows, 0 without), rolled back, and learns whether the server is MariaDB.
func (s *Store) foundRows(ctx context.Context) error {
	failed := func(err error) error { return s.wrap(err, "check mysql connection", "", "fence_tokens") }
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return failed(err)
	}
	defer tx.Rollback()
	var n int64
	for range 2 {
		if n, err = affected(tx.ExecContext(ctx, mysqlsql.ProbeSQL, probeResource)); err != nil {
			return failed(err)
		}
	}
	var version string
	if err := tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return failed(err)
	}
	s.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
	if n == 0 {
		return fmt.Errorf("%w: rows changed are counted instead of rows matched, so a valid "+
			"write of unchanged values would look refused; add clientFoundRows=true to the DSN "+
			"(user:pass@tcp(host:3306)/db?clientFoundRows=true&interpolateParams=true) or open "+
			"the pool with sqlfence/mysql's Open", errFoundRows)
	}
	return nil
}
