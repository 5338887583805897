package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/pgsql"
	"github.com/fencegate/fencegate/nolock"
)

// postgres is PostgreSQL through a database/sql driver, its errors read by SQLSTATE
// (pgx's *pgconn.PgError and lib/pq's *pq.Error both report it).
type postgres struct{ base }

func (postgres) dialect() dialect.Dialect { return dialect.Postgres }
func (postgres) now() string              { return "now()" }
func (postgres) prepares() bool           { return false } // pgx's stdlib keeps statements prepared by text
func (postgres) markSQL() string          { return pgsql.MarkSQL }

// rebind turns ? into $n outside double-quoted identifiers, the package's only quoted text.
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

// raise is pgxfence's one statement (pgsql.RaiseLiteral), sent without parameters:
// nothing is prepared, whatever the driver's exec mode, so it works through a
// transaction pooler. Its errors read as pgxfence's.
func (postgres) raise(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error {
	q, err := pgsql.RaiseLiteral(g, s.set.IdleMS(g))
	if err != nil {
		return fmt.Errorf("%w: sqlfence: %w", fence.ErrInvalidArgument, err)
	}
	_, err = tx.ExecContext(ctx, q)
	if err == nil {
		return nil
	}
	if e := pgsql.Refusal(g, sqlState(err), err.Error(), err); e != nil {
		return e
	}
	return s.raiseErr(g, err)
}

func (d postgres) raiseSet(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error {
	return d.raise(ctx, s, tx, g)
}

// update is pgsql.UpdateSQL, raising the fence row by a plain UPDATE (cheaper),
// then, if that wrote nothing, by the upsert.
func (postgres) update(ctx context.Context, s *Store, st *rowStmt) error {
	args := append(append([]any{st.g.Resource(), int64(st.g.Token())}, st.SetVals...), st.KeyVals...)
	for _, bump := range []bool{true, false} {
		n, err := s.updateTry(ctx, st, pgsql.UpdateSQL(st.Table, st.Token, st.Keys, st.Set, bump), args)
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

// keySQL: a stored key inserts nothing (DO NOTHING), as an error would abort the
// transaction. Under READ COMMITTED the read sees the committed row; under stricter
// levels the waiting claim failed with 40001 and Once started over.
func (d postgres) keySQL() keySQL {
	return keySQL{
		claim: d.rebind(claimKeyCols + "now() + CAST(? AS BIGINT) * INTERVAL '1 microsecond') ON CONFLICT (idem_key) DO NOTHING"),
		read:  d.rebind(readKeyQuery(d)),
		purge: "DELETE FROM idempotency_keys WHERE idem_key IN (SELECT idem_key FROM idempotency_keys " +
			"WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)",
	}
}

func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// busy: a serialization failure (a newer raise after this snapshot), a deadlock, a
// lock not available.
func (postgres) busy(err error) bool {
	switch sqlState(err) {
	case pgsql.Serialization, pgsql.Deadlock, pgsql.LockUnavailable:
		return true
	}
	return false
}

var pgUniqueRE = regexp.MustCompile(`unique constraint "((?:[^"]|"")*)"`)

func (postgres) duplicate(err error, table string) *nolock.DuplicateError {
	if sqlState(err) != pgsql.Unique {
		return nil
	}
	return dupErr(err, table, pgUniqueRE, err.Error(), `""`)
}

func (postgres) missingTable(err error, table string) bool {
	return sqlState(err) == pgsql.NoTable && strings.Contains(err.Error(), table)
}

func (postgres) missingColumn(err error, column string) bool {
	return sqlState(err) == pgsql.NoColumn && strings.Contains(err.Error(), `"`+column+`"`)
}

func (postgres) replyLost(err error, commit bool) bool {
	if st := sqlState(err); st != "" {
		return pgsql.ReplyLost(st, pgSeverity(err))
	}
	return undecided(err, commit)
}

// pgSeverity is the error's SeverityUnlocalized field (pgx's *pgconn.PgError), or "".
func pgSeverity(err error) string {
	var e interface{ SQLState() string }
	if !errors.As(err, &e) {
		return ""
	}
	v := reflect.ValueOf(e)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	if f := v.FieldByName("SeverityUnlocalized"); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

func (postgres) idleEnded(err error, _, _ bool) bool { return sqlState(err) == pgsql.IdleTimeout }
