// Package fencemark reads and raises the high-water tokens the adapters store in
// the library's fence_tokens table, for operators: the fence that cuts off a
// stuck or runaway lock holder at once, whether or not anyone holds its lock.
//
//	next, err := locks.NextToken(ctx) // etcd's revision + 1: above every token granted so far
//	before, after, err := fencemark.Raise(ctx, db, migrations.Postgres, "account-42", next)
//
// From then on the database refuses, with fence.ErrStale, every fenced write of
// the adapters (fence.Exec, Update, Upsert, Delete: each checks the resource's
// mark) that presents a token below next: every holder granted before NextToken
// was read, and a set holding the resource among others. A holder granted later has a token of at least next and writes as usual.
// A fenced transaction that holds the resource's row when Raise runs finishes
// first (Raise waits for its row lock) and is the last write of the old holders.
//
// After promoting a replica that may lag its old primary (asynchronous replication),
// marks and acknowledged writes may be gone: RaiseAll raises every mark to NextToken at
// once, and fencectl fence -all does that and fences each lock held by name.
//
// It works through database/sql on PostgreSQL (pgx's stdlib driver; a pgxpool
// user can pass stdlib.OpenDBFromPool(pool)), MySQL/MariaDB and SQLite, named by
// a migrations.Dialect. Errors are the fence and migrations packages' sentinels,
// or the driver's error wrapped; this package defines none of its own.
package fencemark

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/migrations"
)

// sqlOf returns d's statements on the marks, written with the adapters' raise in the
// dialect's own package (internal/pgsql, mysqlsql, sqlitesql).
func sqlOf(d migrations.Dialect) (dialect.Marks, error) {
	if m, ok := dialect.MarksOf(d); ok {
		return m, nil
	}
	return dialect.Marks{}, fmt.Errorf("fencemark: unknown dialect %d: want migrations.Postgres, MySQL or SQLite: %w", int(d), fence.ErrInvalidArgument)
}

func check(db *sql.DB, d migrations.Dialect, resource string) (dialect.Marks, error) {
	if db == nil {
		return dialect.Marks{}, fmt.Errorf("%w: nil *sql.DB", fence.ErrInvalidArgument)
	}
	if err := fence.CheckResource(resource); err != nil {
		return dialect.Marks{}, err
	}
	return sqlOf(d)
}

// Read returns the high-water token stored for resource, or 0 when none is
// (no fenced write for it has reached this database). ctx governs the query.
//
// It returns fence.ErrInvalidArgument for a nil db, a bad resource or an unknown
// dialect before any I/O, or the driver's
// error wrapped (a missing fence_tokens table: apply the migrations).
func Read(ctx context.Context, db *sql.DB, d migrations.Dialect, resource string) (fence.Token, error) {
	st, err := check(db, d, resource)
	if err != nil {
		return 0, err
	}
	return scan(db.QueryRowContext(ctx, st.Read, resource), resource)
}

// Raise raises the high-water token stored for resource to token, unless a token
// at least as high is stored: it never lowers a mark. It returns the stored
// token before and after (0 before when there was none). It is one transaction:
// read the row and lock it (PostgreSQL, MySQL: FOR UPDATE; SQLite: the database's
// write lock, with sqlfence/sqlite's pools), a conditional upsert (INSERT ...
// ON CONFLICT / ON DUPLICATE KEY that updates only where the stored token is
// lower), and a read of the result. ctx governs the transaction.
//
// It returns fence.ErrInvalidArgument for a nil db, a bad resource, a token <= 0
// or an unknown dialect, all before any I/O; or the driver's error wrapped,
// after which nothing was changed.
func Raise(ctx context.Context, db *sql.DB, d migrations.Dialect, resource string, token fence.Token) (before, after fence.Token, err error) {
	st, err := check(db, d, resource)
	if err != nil {
		return 0, 0, err
	}
	if token <= 0 {
		return 0, 0, fmt.Errorf("fence: invalid token %d for %q: tokens are > 0: %w", token, resource, fence.ErrInvalidArgument)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("fencemark: begin: %w", err)
	}
	defer tx.Rollback() // after Commit, a no-op
	if before, err = scan(tx.QueryRowContext(ctx, st.Lock, resource), resource); err != nil {
		return 0, 0, err
	}
	if before < token {
		if _, err := tx.ExecContext(ctx, st.Raise, resource, int64(token)); err != nil {
			return 0, 0, fmt.Errorf("fencemark: raise the mark of %q to %d: %w", resource, token, err)
		}
	}
	if after, err = scan(tx.QueryRowContext(ctx, st.Lock, resource), resource); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, fmt.Errorf("fencemark: commit the mark of %q: %w", resource, err)
	}
	return before, after, nil
}

// RaiseAll raises every mark stored below token to token, in one statement, and
// returns how many it raised; it never lowers one. A fenced transaction holding a
// mark's row finishes first (the UPDATE waits for its row lock). Run it with
// NextToken after a failover to a replica that may have lost writes: every holder
// granted before is refused wherever a mark is stored. A resource with no mark on
// this database is not covered: Raise it by name (fencectl fence -all raises each
// lock held in etcd).
//
// It returns fence.ErrInvalidArgument for a nil db, a token <= 0 or an unknown
// dialect before any I/O, or the driver's error wrapped (nothing raised).
func RaiseAll(ctx context.Context, db *sql.DB, d migrations.Dialect, token fence.Token) (int64, error) {
	if db == nil {
		return 0, fmt.Errorf("%w: nil *sql.DB", fence.ErrInvalidArgument)
	}
	if token <= 0 {
		return 0, fmt.Errorf("fence: invalid token %d: tokens are > 0: %w", token, fence.ErrInvalidArgument)
	}
	st, err := sqlOf(d)
	if err != nil {
		return 0, err
	}
	args := []any{int64(token), int64(token)}[:st.RaiseAllArgs]
	res, err := db.ExecContext(ctx, st.RaiseAll, args...)
	if err != nil {
		return 0, fmt.Errorf("fencemark: raise every mark to %d: %w", token, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("fencemark: raise every mark to %d: %w", token, err)
	}
	return n, nil
}

func scan(row *sql.Row, resource string) (fence.Token, error) {
	var t int64
	switch err := row.Scan(&t); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("fencemark: read the mark of %q (are fencegate's migrations applied?): %w", resource, err)
	}
	return fence.Token(t), nil
}
