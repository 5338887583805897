package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/sqlitesql"
	"github.com/fencegate/fencegate/nolock"
)

// sqlite is SQLite through modernc.org/sqlite, in-process: several statements cost no
// round trips, no reply is ever lost, and nothing else ends an idle transaction.
type sqlite struct{ base }

func (sqlite) dialect() dialect.Dialect { return dialect.SQLite }
func (sqlite) now() string              { return "strftime('%Y-%m-%d %H:%M:%f', 'now')" }

func (sqlite) isolation(l sql.IsolationLevel) error {
	if l != sql.LevelDefault && l != sql.LevelSerializable {
		return fmt.Errorf("isolation level %s: sqlite transactions are always serializable", l)
	}
	return nil
}

func (sqlite) markSQL() string { return sqlitesql.MarkSQL }

// raise is sqlitesql's bump, else its upsert, which changes no row when refused.
func (sqlite) raise(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error {
	return s.bumpOrUpsert(ctx, tx, g, sqlitesql.BumpSQL, sqlitesql.RaiseSQL,
		func(res sql.Result) (bool, fence.Token, error) {
			n, err := res.RowsAffected()
			return n == 0, 0, err
		})
}

func (sqlite) raiseSet(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error {
	n := len(g.Resources())
	return s.raiseSet(ctx, tx, g, sqlitesql.RaiseSetSQL(n), sqlitesql.HigherSQL(n), true)
}

func (sqlite) update(ctx context.Context, s *Store, st *rowStmt) error { return s.txUpdate(ctx, st) }

// upsertTail: an unqualified name in DO UPDATE is the existing row.
func (sqlite) upsertTail(st *rowStmt) string { return onConflictTail(st, st.Token) }

// keySQL: the time-to-live is a "+N seconds" modifier (ttlArg).
func (d sqlite) keySQL() keySQL {
	return keySQL{
		claim: claimKeyCols + "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)) ON CONFLICT (idem_key) DO NOTHING",
		read:  readKeyQuery(d),
		purge: "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys WHERE expires_at <= " + d.now() + " LIMIT ?)",
	}
}

func (sqlite) ttlArg(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	return fmt.Sprintf("+%.6f seconds", ttl.Seconds())
}

// sqliteError reads the first *sqlite.Error in err's tree: extended code and message.
func sqliteError(err error) (code int, msg string, ok bool) {
	e := findType(err, "modernc.org/sqlite", "Error")
	c, isCoder := e.(interface{ Code() int })
	if !isCoder {
		return 0, "", false
	}
	return c.Code(), e.Error(), true
}

// busy: SQLITE_BUSY and SQLITE_LOCKED, any extended code.
func (sqlite) busy(err error) bool {
	code, _, ok := sqliteError(err)
	return ok && (code&0xff == 5 || code&0xff == 6)
}

// "UNIQUE constraint failed: t.a, t.b": the columns of a unique-key violation.
var sqliteUniqueRE = regexp.MustCompile(`(?:UNIQUE|PRIMARY KEY) constraint failed: ([^(]*?)\s*(?:\(\d+\))?$`)

func (sqlite) duplicate(err error, table string) *nolock.DuplicateError {
	code, msg, ok := sqliteError(err)
	if !ok || code != 2067 && code != 1555 { // SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY
		return nil
	}
	return dupErr(err, table, sqliteUniqueRE, msg, "")
}

func (sqlite) missingTable(err error, table string) bool {
	_, msg, ok := sqliteError(err)
	return ok && strings.Contains(msg, "no such table: "+table)
}

func (sqlite) missingColumn(err error, column string) bool {
	_, msg, ok := sqliteError(err)
	return ok && (strings.Contains(msg, "no such column") || strings.Contains(msg, "has no column named")) &&
		strings.Contains(msg, column)
}

func (sqlite) replyLost(err error, commit bool) bool {
	_, _, ok := sqliteError(err)
	return !ok && undecided(err, commit)
}
