package sqlfence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/internal/grant"
	"github.com/fencegate/fencegate/internal/mysqlsql"
	"github.com/fencegate/fencegate/nolock"
)

// mysql is MySQL and MariaDB through go-sql-driver/mysql. With no UPDATE ... RETURNING,
// statements hand a value back as LAST_INSERT_ID(expr), reported with the row count;
// ON DUPLICATE KEY assignments run left to right.
type mysql struct{ base }

func (mysql) dialect() dialect.Dialect                  { return dialect.MySQL }
func (mysql) now() string                               { return "CURRENT_TIMESTAMP(6)" }
func (mysql) probe(ctx context.Context, s *Store) error { return s.probeFoundRows(ctx) }
func (mysql) markSQL() string                           { return mysqlsql.MarkSQL }

// raise is mysqlsql's bump, else its upsert, which hands a refusal's stored token back
// as LAST_INSERT_ID.
func (mysql) raise(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error {
	return s.bumpOrUpsert(ctx, tx, g, mysqlsql.BumpSQL, mysqlsql.RaiseSQL, func(res sql.Result) (bool, fence.Token, error) {
		id, err := res.LastInsertId()
		return id > 0, fence.Token(id), err
	})
}

// raiseSet: a row left as it was counts as found (clientFoundRows), so the set's
// lookup always runs.
func (mysql) raiseSet(ctx context.Context, s *Store, tx *sql.Tx, g *grant.Checked) error {
	n := len(g.Resources())
	return s.raiseSet(ctx, tx, g, mysqlsql.RaiseSetSQL(n), mysqlsql.HigherSQL(n), false)
}

// update is mysqlsql.UpdateSQL, the fence row joined to the row. With no fence row to
// join, a resource's first write is a transaction.
func (mysql) update(ctx context.Context, s *Store, st *rowStmt) error {
	q := mysqlsql.UpdateSQL(st.Table, st.Token, st.Keys, st.Set)
	tok := int64(st.g.Token())
	args := slices.Concat(st.KeyVals, st.SetVals, []any{tok, tok, st.g.Resource(), tok, tok})
	if n, err := s.updateTry(ctx, st, q, args); err != nil || n > 0 {
		return err
	}
	switch found, err := s.fenceStale(ctx, st.g); {
	case err != nil:
		return err
	case !found:
		return s.txUpdate(ctx, st)
	}
	return s.refused(ctx, s.db, st)
}

// upsertTail: ON DUPLICATE KEY UPDATE fires on any unique key, so every column is
// guarded by the old token and the key (leaving another key's row alone), token last.
// A refusal reports stored token + 1 (never 0) as LAST_INSERT_ID; Upsert reads the
// row back to tell it from an AUTO_INCREMENT id.
func (mysql) upsertTail(st *rowStmt) string {
	var b strings.Builder
	cond := st.Token + " <= VALUES(" + st.Token + ")"
	for _, k := range st.Keys {
		cond += " AND " + k + " <=> VALUES(" + k + ")"
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for _, c := range st.Set {
		fmt.Fprintf(&b, "%s = IF(%s, VALUES(%s), %s), ", c, cond, c, c)
	}
	fmt.Fprintf(&b, "%s = IF(%s, VALUES(%s), LAST_INSERT_ID(%s + 1))", st.Token, cond, st.Token, st.Token)
	return b.String()
}

func (mysql) upserted(res sql.Result) (bool, error) {
	id, err := res.LastInsertId()
	return id != 0, err
}

// decrementSQL hands the new value back as LAST_INSERT_ID, which the guard keeps >= 0.
func (mysql) decrementSQL(table, col, where string) string {
	return "UPDATE " + table + " SET " + col + " = LAST_INSERT_ID(" + col + " - ?) WHERE " + where + " AND " + col + " >= ?"
}

func (mysql) take(ctx context.Context, db *sql.DB, sh *shape, args []any) (int64, bool, error) {
	res, err := sh.exec(ctx, db, args)
	if err != nil {
		return 0, false, err
	}
	if rows, err := res.RowsAffected(); err != nil || rows == 0 {
		return 0, false, err
	}
	left, err := res.LastInsertId()
	return left, err == nil, err
}

// keySQL: a stored key is error 1062, which leaves the transaction open (claimed). The
// read locks: under REPEATABLE READ a plain SELECT could miss the duplicate it waited for.
func (d mysql) keySQL() keySQL {
	return keySQL{
		claim: claimKeyCols + "DATE_ADD(CURRENT_TIMESTAMP(6), INTERVAL ? MICROSECOND))",
		read:  readKeyQuery(d) + " LOCK IN SHARE MODE",
		purge: "DELETE FROM idempotency_keys WHERE expires_at <= CURRENT_TIMESTAMP(6) LIMIT ?",
	}
}

func (d mysql) claimed(err error) bool { return d.duplicate(err, "idempotency_keys") != nil }

type mysqlError struct {
	Number   uint16
	SQLState string
	Message  string
}

// asMySQL reads the first *mysql.MySQLError in err's tree by its fields.
func asMySQL(err error) (mysqlError, bool) {
	e := findType(err, "github.com/go-sql-driver/mysql", "MySQLError")
	if e == nil {
		return mysqlError{}, false
	}
	v := reflect.ValueOf(e).Elem()
	num, state, msg := v.FieldByName("Number"), v.FieldByName("SQLState"), v.FieldByName("Message")
	if num.Kind() != reflect.Uint16 || msg.Kind() != reflect.String {
		return mysqlError{}, false
	}
	me := mysqlError{Number: uint16(num.Uint()), Message: msg.String()}
	if state.Kind() == reflect.Array && state.Type().Elem().Kind() == reflect.Uint8 {
		me.SQLState = string(state.Bytes())
	}
	return me, true
}

// busy: a deadlock (1213, rolled back) or a lock wait timeout (1205).
func (mysql) busy(err error) bool {
	me, ok := asMySQL(err)
	return ok && (me.Number == 1213 || me.Number == 1205)
}

var mysqlDupKeyRE = regexp.MustCompile(`for key '((?:[^']|'')*)'`)

func (mysql) duplicate(err error, table string) *nolock.DuplicateError {
	me, ok := asMySQL(err)
	if !ok || me.Number != 1062 {
		return nil
	}
	de := dupErr(err, table, mysqlDupKeyRE, me.Message, "''")
	// MySQL 8 says 'table.index', MariaDB 'index'.
	de.Constraint = strings.TrimPrefix(de.Constraint, table[strings.LastIndexByte(table, '.')+1:]+".")
	return de
}

func (mysql) missingTable(err error, table string) bool {
	me, ok := asMySQL(err)
	return ok && me.Number == 1146 && strings.Contains(me.Message, table)
}

func (mysql) missingColumn(err error, column string) bool {
	me, ok := asMySQL(err)
	return ok && me.Number == 1054 && strings.Contains(me.Message, column)
}

// replyLost: MariaDB's 1927 (connection killed) and 1053 (server shutdown) end the
// session and may follow a recorded commit.
func (mysql) replyLost(err error, commit bool) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == 1927 || me.Number == 1053
	}
	return undecided(err, commit)
}

// idleEnded: MySQL 8.0.24+ says 4031. MariaDB and older MySQL close silently: the sign
// is a connection broken in a transaction overdue, found closed (ErrBadConn) or, for
// fn's statements, a lost reply (nothing commits without COMMIT). A COMMIT whose reply
// was lost may have arrived in time: it stays fence.ErrCommitUnknown.
func (mysql) idleEnded(err error, commit, overdue bool) bool {
	if me, ok := asMySQL(err); ok {
		return me.Number == 4031
	}
	broken := errors.Is(err, driver.ErrBadConn) ||
		!commit && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.HasSuffix(err.Error(), "invalid connection"))
	return broken && overdue
}
