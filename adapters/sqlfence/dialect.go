package sqlfence

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/engine"
)

// dialect is the handful of things that differ between the databases a Store speaks
// to: identifier quoting, the fence-row upsert and the token-column upsert (how each
// driver reports its errors is in errors.go). It is the one Dialect (migrations.Dialect, internal/engine) with
// this package's statements attached:
//
//   - migrations.MySQL is MariaDB 10.5 and later (tested on 10.11) or MySQL 8 through
//     github.com/go-sql-driver/mysql. Upserts use VALUES(col) in ON DUPLICATE KEY
//     UPDATE, which MySQL 8.0.20 and later accept with a deprecation warning. The
//     connection must report matched rows (clientFoundRows=true); sqlfence/mysql's
//     Open sets it, and a Store refuses a pool without it.
//   - migrations.SQLite is SQLite 3.35 and later through modernc.org/sqlite (driver
//     name "sqlite"). See sqlfence/sqlite's Open for the settings concurrent
//     writers need.
//   - migrations.Postgres is PostgreSQL 12 and later through a database/sql driver
//     such as github.com/jackc/pgx/v5/stdlib; the pgxfence adapter does the same
//     through pgx directly, with fewer round trips.
type dialect struct{ engine.Dialect }

const (
	dMySQL    = engine.MySQL
	dSQLite   = engine.SQLite
	dPostgres = engine.Postgres
)

func (d dialect) check() error {
	if d.Dialect != dMySQL && d.Dialect != dSQLite && d.Dialect != dPostgres {
		return fmt.Errorf("sqlfence: unknown dialect %d: want migrations.Postgres, MySQL or SQLite: %w", int(d.Dialect), fence.ErrInvalidArgument)
	}
	return nil
}

// rebind turns the ? placeholders of a statement built by this package into $1, $2,
// ... for PostgreSQL. The only quoted text such a statement holds is double-quoted
// identifiers (values are always arguments), and a ? inside one is left alone.
func (d dialect) rebind(q string) string {
	if d.Dialect != dPostgres || !strings.Contains(q, "?") {
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

// ident checks and quotes a column name (internal/engine: the limits and
// the error, wrapping fence.ErrInvalidArgument, are the migrations generator's too).
func (d dialect) ident(what, name string) (string, error) {
	return engine.CheckIdent(d.Dialect, what, name)
}

// table checks and quotes a table name; one dot separates a schema from the table.
func (d dialect) table(name string) (string, error) { return engine.QuoteTable(d.Dialect, name) }

// bumpSQL raises an existing fence row whose token is not higher, locking it to
// commit. Arguments: token, resource, token.
func (d dialect) bumpSQL() string {
	now := "CURRENT_TIMESTAMP"
	if d.Dialect == dMySQL {
		now = "CURRENT_TIMESTAMP(6)"
	}
	return "UPDATE fence_tokens SET token = ?, updated_at = " + now + " WHERE resource = ? AND token <= ?"
}

// raiseSQL raises the resource's fence row to the presented token unless a higher one
// is stored, inserting it if missing, and locks it to commit: the fallback when
// bumpSQL matched nothing. Arguments: resource, token.
//
// MySQL evaluates ON DUPLICATE KEY assignments left to right, each seeing the columns
// already assigned, so updated_at is decided before token changes. A refused raise
// leaves the row as it was and hands the stored token back as LAST_INSERT_ID (the
// table has no AUTO_INCREMENT column, so a raise reports 0), saving a lookup.
func (d dialect) raiseSQL() string {
	if d.Dialect == dMySQL {
		return "INSERT INTO fence_tokens (resource, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE " +
			"updated_at = IF(token <= VALUES(token), CURRENT_TIMESTAMP(6), updated_at), " +
			"token = IF(token <= VALUES(token), VALUES(token), LAST_INSERT_ID(token))"
	}
	return "INSERT INTO fence_tokens (resource, token) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE " +
		"SET token = excluded.token, updated_at = CURRENT_TIMESTAMP WHERE fence_tokens.token <= excluded.token"
}

// raised reads the result of raiseSQL: whether the raise was refused, and the stored
// token when the dialect reports it without another query.
func (d dialect) raised(res sql.Result) (stale bool, seen fence.Token, err error) {
	if d.Dialect == dMySQL {
		id, err := res.LastInsertId()
		return id > 0, fence.Token(id), err
	}
	n, err := res.RowsAffected()
	return n == 0, 0, err
}

// upsertTail is the clause that turns the INSERT of key, set and token columns into a
// fenced upsert: the existing row is updated only if its token is not higher.
//
// MySQL: ON DUPLICATE KEY UPDATE fires on any unique key, and each assignment sees
// the ones before it, so every column is guarded by the same condition on the old
// token and on the key (a clash on another unique key must not update that other
// row), and the token is assigned last. A refused update reports the stored token + 1
// (never 0, even for a row with token 0) as LAST_INSERT_ID; the caller reads the row
// back to tell that from an AUTO_INCREMENT id.
// SQLite and PostgreSQL: ON CONFLICT on the key columns.
func (d dialect) upsertTail(qtable string, keys, set []string, tok string) string {
	var b strings.Builder
	if d.Dialect == dMySQL {
		cond := tok + " <= VALUES(" + tok + ")"
		for _, k := range keys {
			cond += " AND " + k + " <=> VALUES(" + k + ")"
		}
		b.WriteString(" ON DUPLICATE KEY UPDATE ")
		for _, c := range set {
			fmt.Fprintf(&b, "%s = IF(%s, VALUES(%s), %s), ", c, cond, c, c)
		}
		fmt.Fprintf(&b, "%s = IF(%s, VALUES(%s), LAST_INSERT_ID(%s + 1))", tok, cond, tok, tok)
		return b.String()
	}
	b.WriteString(" ON CONFLICT (" + strings.Join(keys, ", ") + ") DO UPDATE SET ")
	for _, c := range set {
		fmt.Fprintf(&b, "%s = excluded.%s, ", c, c)
	}
	old := tok // SQLite: an unqualified name is the existing row
	if d.Dialect == dPostgres {
		old = qtable + "." + tok // PostgreSQL: ambiguous unless qualified
	}
	fmt.Fprintf(&b, "%s = excluded.%s WHERE %s <= excluded.%s", tok, tok, old, tok)
	return b.String()
}

// upserted reads the result of an upsert: refused (or ambiguous, on MySQL) means
// the caller must read the row back.
func (d dialect) upserted(res sql.Result) (check bool, err error) {
	if d.Dialect == dMySQL {
		id, err := res.LastInsertId()
		return id != 0, err
	}
	n, err := res.RowsAffected()
	return n == 0, err
}
