package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/core/grant"
)

// replyLost reports whether err, from a COMMIT or from a write sent outside a
// transaction, leaves the outcome unknown: the statement was (or may have been) sent
// and no answer of the server's decides it.
//
// Decided: errors database/sql or the driver raise before sending (driver.ErrBadConn,
// a done Tx or Conn, ctx's own error returned unwrapped by database/sql when ctx ended
// before the COMMIT went out), the server's error replies, and every SQLite error
// (its COMMIT runs in this process: its error is the engine's answer, never a lost
// reply). Undecided: a broken or closed connection (mysql.ErrInvalidConn, EOF, a
// network error, ctx ending while the reply was awaited) and the replies that end the
// session, which may come after the commit was recorded: MariaDB's "connection was
// killed" (1927) and "server shutdown" (1053), PostgreSQL's classes 08 (connection
// exception) and 57P (operator intervention: a terminated backend).
func replyLost(err error, commit bool) bool {
	if err == nil {
		return false
	}
	if me, ok := asMySQL(err); ok {
		return me.Number == 1927 || me.Number == 1053
	}
	switch {
	case findType(err, sqlitePkg, "Error") != nil:
		return false
	case sqlState(err) != "":
		st := sqlState(err)
		return strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P")
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrTxDone), errors.Is(err, sql.ErrConnDone):
		return false
	case commit && (err == context.Canceled || err == context.DeadlineExceeded):
		// Tx.Commit checks ctx before sending; a driver that reads the reply under
		// ctx wraps its error.
		return false
	}
	return true
}

// unknownOutcome returns fence.ErrCommitUnknown for err when its reply was lost,
// or nil.
func unknownOutcome(op string, g fence.Grant, err error, commit bool) error {
	if !replyLost(err, commit) {
		return nil
	}
	return grant.CommitUnknown(g, op, err)
}
