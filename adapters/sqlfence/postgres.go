package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
	"github.com/fencegate/fencegate/nolock"
)

// postgres is PostgreSQL through a database/sql driver. Its fence raise is the
// statement pgxfence sends (internal/engine), and its errors are read by SQLSTATE,
// which pgx's *pgconn.PgError and lib/pq's *pq.Error both report.
type postgres struct{}

func (postgres) dialect() engine.Dialect             { return engine.Postgres }
func (postgres) now() string                         { return "now()" }
func (postgres) probe(context.Context, *Store) error { return nil }
func (postgres) isolation(sql.IsolationLevel) error  { return nil }
func (postgres) countsRaised() bool                  { return true }
func (postgres) raiseSetTail() string                { return onConflictRaise }

func (postgres) fenced(ctx context.Context, s *Store, g *engine.Checked, fn func(*sql.Tx) error) error {
	return s.run(ctx, s.db, g, fn)
}

// rebind turns the ? placeholders of a statement built by this package into $1, $2,
// .... The only quoted text such a statement holds is double-quoted identifiers
// (values are always arguments), and a ? inside one is left alone.
func (postgres) rebind(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '"':
			quoted = !quoted // a doubled "" leaves and re-enters: still inside
		case c == '?' && !quoted:
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// raise inserts or raises the fence row, locks it to commit and bounds the
// transaction's idle time, in one statement. A refusal aborts the transaction (the
// caller rolls it back) and names the stored token.
func (postgres) raise(ctx context.Context, s *Store, tx *sql.Tx, g *engine.Checked) error {
	_, err := tx.ExecContext(ctx, engine.PGRaiseIdleSQL, g.Resource(), int64(g.Token()), s.set.IdleMS(g))
	if err == nil {
		return nil
	}
	if sqlState(err) == engine.PGBadText {
		if seen, _, ok := engine.PGMarkedStale(err.Error()); ok {
			return &fence.StaleError{Resource: g.Resource(), Presented: g.Token(), Seen: seen}
		}
	}
	return s.raiseErr(g, err)
}

// update is Update in one statement (engine.PGUpdateSQL): the fence row raised by a
// plain UPDATE first (cheaper for the server), and by the upsert, which also inserts
// it, only when that wrote nothing.
func (d postgres) update(ctx context.Context, s *Store, st *rowStmt) error {
	args := append(append([]any{st.g.Resource(), int64(st.g.Token())}, st.SetVals...), st.KeyVals...)
	for _, bump := range []bool{true, false} {
		n, err := s.updateTry(ctx, st, engine.PGUpdateSQL(st.Table, st.Token, st.Keys, st.Set, bump), args)
		if err != nil || n > 0 {
			return err
		}
	}
	if _, err := s.fenceStale(ctx, st.g); err != nil {
		return err
	}
	return s.refused(ctx, s.db, st)
}

func (postgres) upsertTail(st *rowStmt) string {
	return onConflictTail(st, st.Table+"."+st.Token) // ambiguous unless qualified
}

func (postgres) upserted(res sql.Result) (bool, error) { return rowsNone(res) }

func (d postgres) decrementSQL(table, col, where string) string {
	return d.rebind("UPDATE " + table + " SET " + col + " = " + col + " - ? WHERE " + where + " AND " + col + " >= ? RETURNING " + col)
}

func (postgres) take(ctx context.Context, db *sql.DB, sh *shape, args []any) (int64, bool, error) {
	return takeReturning(ctx, db, sh, args)
}

// prepares is false: pgx's stdlib already keeps statements prepared per connection
// by their text.
func (postgres) prepares() bool { return false }

// claimKeySQL: a key already stored is no row inserted (ON CONFLICT DO NOTHING), as
// an error would abort the transaction.
func (d postgres) claimKeySQL() string {
	return d.rebind(claimKeyCols + "now() + CAST(? AS BIGINT) * INTERVAL '1 microsecond') ON CONFLICT (idem_key) DO NOTHING")
}

// readKeySQL: under READ COMMITTED a new statement reads the committed row; under
// the stricter levels the claim that waited failed with 40001 and Once started over.
func (d postgres) readKeySQL() string { return d.rebind(readKeyQuery(d)) }

func (postgres) purgeKeysSQL() string {
	return "DELETE FROM idempotency_keys WHERE idem_key IN (SELECT idem_key FROM idempotency_keys " +
		"WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)"
}

func (postgres) ttlArg(ttl time.Duration) any { return ttlMicros(ttl) }
func (postgres) claimed(error) bool           { return false }

// sqlState returns the SQLSTATE of a PostgreSQL driver's error, or "".
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// busy: a serialization failure (under REPEATABLE READ or SERIALIZABLE a newer
// transaction raised the fence row after this one's snapshot), a deadlock, a lock
// not available.
func (postgres) busy(err error) bool {
	switch sqlState(err) {
	case engine.PGSerialization, engine.PGDeadlock, engine.PGLockUnavailable:
		return true
	}
	return false
}

var pgUniqueRE = regexp.MustCompile(`unique constraint "((?:[^"]|"")*)"`)

func (postgres) duplicate(err error, table string) *nolock.DuplicateError {
	if sqlState(err) != engine.PGUnique {
		return nil
	}
	name := ""
	if m := pgUniqueRE.FindStringSubmatch(err.Error()); m != nil {
		name = strings.ReplaceAll(m[1], `""`, `"`)
	}
	return &nolock.DuplicateError{Table: table, Constraint: name, Err: err}
}

func (postgres) missingTable(err error, table string) bool {
	return sqlState(err) == engine.PGNoTable && strings.Contains(err.Error(), table)
}

// replyLost: the classes 08 (connection exception) and 57P (operator intervention:
// a terminated backend) may come after the commit was recorded.
func (postgres) replyLost(err error, commit bool) bool {
	if st := sqlState(err); st != "" {
		return strings.HasPrefix(st, "08") || strings.HasPrefix(st, "57P")
	}
	return undecided(err, commit)
}

func (postgres) idleEnded(err error, _, _ bool) bool { return sqlState(err) == engine.PGIdleTimeout }
