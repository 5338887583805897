package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// sqlite is SQLite through modernc.org/sqlite. One writer holds the database's lock
// and statements run in this process, so a write of several statements costs no
// round trips, and every error is the engine's own answer, never a lost reply.
type sqlite struct{}

func (sqlite) dialect() engine.Dialect             { return engine.SQLite }
func (sqlite) rebind(q string) string              { return q }
func (sqlite) now() string                         { return "strftime('%Y-%m-%d %H:%M:%f', 'now')" }
func (sqlite) probe(context.Context, *Store) error { return nil }
func (sqlite) raiseSetTail() string                { return onConflictRaise }
func (sqlite) countsRaised() bool                  { return true }
func (sqlite) prepares() bool                      { return true } // modernc parses every text anew

func (sqlite) fenced(ctx context.Context, s *Store, g *engine.Checked, fn func(*sql.Tx) error) error {
	return s.run(ctx, s.db, g, fn)
}

// isolation: SQLite transactions are always serializable.
func (sqlite) isolation(l sql.IsolationLevel) error {
	if l != sql.LevelDefault && l != sql.LevelSerializable {
		return fmt.Errorf("isolation level %s: sqlite transactions are always serializable", l)
	}
	return nil
}

const sqliteBumpSQL = "UPDATE fence_tokens SET token = ?, updated_at = CURRENT_TIMESTAMP WHERE resource = ? AND token <= ?"

func (sqlite) raise(ctx context.Context, s *Store, tx *sql.Tx, g *engine.Checked) error {
	return s.bumpOrUpsert(ctx, tx, g, sqliteBumpSQL, "INSERT INTO fence_tokens (resource, token) VALUES (?, ?)"+onConflictRaise,
		func(res sql.Result) (bool, fence.Token, error) {
			none, err := rowsNone(res)
			return none, 0, err
		})
}

// update is a transaction that raises the fence row, then updates.
func (sqlite) update(ctx context.Context, s *Store, st *rowStmt) error { return s.txUpdate(ctx, st) }

// upsertTail: an unqualified name in DO UPDATE is the existing row.
func (sqlite) upsertTail(st *rowStmt) string         { return onConflictTail(st, st.Token) }
func (sqlite) upserted(res sql.Result) (bool, error) { return rowsNone(res) }

func (sqlite) decrementSQL(table, col, where string) string {
	return "UPDATE " + table + " SET " + col + " = " + col + " - ? WHERE " + where + " AND " + col + " >= ? RETURNING " + col
}

func (sqlite) take(ctx context.Context, db *sql.DB, sh *shape, args []any) (int64, bool, error) {
	return takeReturning(ctx, db, sh, args)
}

// claimKeySQL: the time-to-live is a "+N seconds" modifier (ttlArg).
func (d sqlite) claimKeySQL() string {
	return claimKeyCols + "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)) ON CONFLICT (idem_key) DO NOTHING"
}
func (d sqlite) readKeySQL() string { return readKeyQuery(d) }

func (d sqlite) purgeKeysSQL() string {
	return "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys WHERE expires_at <= " + d.now() + " LIMIT ?)"
}

func (sqlite) ttlArg(ttl time.Duration) any {
	if ttl <= 0 {
		return nil
	}
	return fmt.Sprintf("+%.6f seconds", ttl.Seconds())
}

func (sqlite) claimed(error) bool { return false }

// sqliteError returns the first *sqlite.Error in err's tree: its result code (with
// the extended bits) and message.
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

// The columns SQLite names in a unique-key violation: "UNIQUE constraint failed: t.a, t.b".
var sqliteUniqueRE = regexp.MustCompile(`(?:UNIQUE|PRIMARY KEY) constraint failed: ([^(]*?)\s*(?:\(\d+\))?$`)

func (sqlite) duplicate(err error, table string) *nolock.DuplicateError {
	code, msg, ok := sqliteError(err)
	if !ok || code != 2067 && code != 1555 { // SQLITE_CONSTRAINT_UNIQUE, _PRIMARYKEY
		return nil
	}
	name := ""
	if m := sqliteUniqueRE.FindStringSubmatch(msg); m != nil {
		name = m[1]
	}
	return &nolock.DuplicateError{Table: table, Constraint: name, Err: err}
}

func (sqlite) missingTable(err error, table string) bool {
	_, msg, ok := sqliteError(err)
	return ok && strings.Contains(msg, "no such table: "+table)
}

func (sqlite) replyLost(err error, commit bool) bool {
	if _, _, ok := sqliteError(err); ok {
		return false
	}
	return undecided(err, commit)
}

// idleEnded: nothing ends an idle SQLite transaction but its own process.
func (sqlite) idleEnded(error, bool, bool) bool { return false }
