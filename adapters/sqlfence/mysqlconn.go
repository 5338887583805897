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
	"github.com/fencegate/fencegate/internal/engine"
)

// On MariaDB a fenced transaction through a pool opened by sqlfence/mysql costs the
// round trips of an unfenced one: that package wraps the pool's connections so that
// the begin of a fenced transaction is one anonymous compound statement (BEGIN NOT ATOMIC ... END,
// one statement to the server) that sets the session's idle_transaction_timeout,
// starts the transaction and raises the fence row; and its COMMIT or ROLLBACK is one
// that also restores the timeout to the server's default. The compound's exit handler
// rolls back and restores the timeout before it hands any error back, so a refused
// raise leaves the connection as it found it. A user's own transactions on the same
// pool take the driver's path unchanged. The statements are this package's; the
// wrapped connections only send them (internal/fastbegin).

const restoreIdle = "SET SESSION idle_transaction_timeout = DEFAULT"

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
// opened by sqlfence/mysql, the server's default transaction options, a single grant.
func (s *Store) fast(g *engine.Checked) bool {
	if engine.Multi(g) || !s.mariadb || s.txOpts != nil {
		return false
	}
	_, ok := s.db.Driver().(fastbegin.Driver)
	return ok
}

// fencedFast is Fenced on MariaDB through a sqlfence/mysql pool.
func (s *Store) fencedFast(ctx context.Context, g *engine.Checked, fn func(*sql.Tx) error) error {
	b := &fastbegin.Begin{
		Query:    fastBeginSQL,
		Args:     fastBeginArgs(g, idleSecs(s, g)),
		Commit:   "BEGIN NOT ATOMIC COMMIT; " + restoreIdle + "; END",
		Rollback: "BEGIN NOT ATOMIC ROLLBACK; " + restoreIdle + "; END",
	}
	bctx := fastbegin.With(ctx, b)
	var tx *sql.Tx
	err := s.retry(ctx, func() error {
		var err error
		tx, err = s.db.BeginTx(bctx, nil)
		switch {
		case err != nil:
			return s.fastBeginErr(g, err)
		case !b.Sent:
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
	return int64(math.Ceil(engine.IdleTimeout(g, s.set.Idle).Seconds()))
}

// fastBeginErr turns the compound's refusal into a *fence.StaleError.
func (s *Store) fastBeginErr(g fence.Grant, err error) error {
	if me, ok := asMySQL(err); ok && me.SQLState == "45000" && strings.HasPrefix(me.Message, staleMsg) {
		if seen, perr := strconv.ParseInt(strings.TrimPrefix(me.Message, staleMsg), 10, 64); perr == nil {
			return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: fence.Token(seen)}
		}
	}
	return s.raiseErr(g, err)
}

// errFoundRows is the refusal of a MySQL pool that counts changed rows instead of
// matched rows, so a fenced write of unchanged values would look refused.
var errFoundRows = fmt.Errorf("%w: sqlfence: the mysql connection lacks clientFoundRows=true", fence.ErrInvalidArgument)

// probeResource is a fence row name no grant can present (fence refuses NUL bytes).
const probeResource = "\x00sqlfence:clientFoundRows probe"

// probeFoundRows checks once per Store that the MySQL pool reports matched rows: in
// a transaction that is always rolled back it writes the probe row and then writes it
// again unchanged, which reports 1 row with clientFoundRows and 0 without. A verdict
// is kept; an error that is not a verdict (ctx ended, network) is returned and the
// check runs again next time.
func (s *Store) probeFoundRows(ctx context.Context) error {
	if s.probeOK.Load() {
		return nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeE
	}
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("sqlfence: check mysql connection: %w", err)
		}
		defer tx.Rollback()
		const q = "INSERT INTO fence_tokens (resource, token) VALUES (?, 1) ON DUPLICATE KEY UPDATE token = token"
		var n int64
		for range 2 {
			res, err := tx.ExecContext(ctx, q, probeResource)
			if s.missingSchema(err) {
				return fmt.Errorf("%w: check mysql connection: %w", fence.ErrSchema, err)
			}
			if err != nil {
				return fmt.Errorf("sqlfence: check mysql connection: %w", err)
			}
			if n, err = res.RowsAffected(); err != nil {
				return fmt.Errorf("sqlfence: check mysql connection: %w", err)
			}
		}
		var version string
		if err := tx.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
			return fmt.Errorf("sqlfence: check mysql connection: %w", err)
		}
		s.mariadb = strings.Contains(strings.ToLower(version), "mariadb")
		if n == 0 {
			return fmt.Errorf("%w: rows changed are counted instead of rows matched, so a valid "+
				"write of unchanged values would look refused; add clientFoundRows=true to the DSN "+
				"(user:pass@tcp(host:3306)/db?clientFoundRows=true&interpolateParams=true) or open "+
				"the pool with sqlfence/mysql's Open", errFoundRows)
		}
		return nil
	})
	if err == nil || errors.Is(err, errFoundRows) {
		s.probed, s.probeE = true, err
		s.probeOK.Store(err == nil)
	}
	return err
}

// fencedPinned is Fenced on MySQL: the transaction runs on a connection pinned for it,
// whose session idle timeout is set before BEGIN and restored after.
func (s *Store) fencedPinned(ctx context.Context, g *engine.Checked, fn func(*sql.Tx) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlfence: get a connection: %w", err)
	}
	defer conn.Close()
	v := "wait_timeout"
	if s.mariadb {
		v = "idle_transaction_timeout"
	}
	secs := idleSecs(s, g)
	if _, err := conn.ExecContext(ctx, "SET SESSION "+v+" = ?", secs); err != nil {
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
