package sqlfence_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/internal/fencetest"
)

func harness(name string, db *sql.DB, d sqlfence.Dialect) fencetest.Harness[*sql.Tx] {
	return fencetest.Harness[*sql.Tx]{
		Name:  name,
		Store: sqlfence.New(db, d),
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, q, args...)
			return err
		},
		QueryInt: func(ctx context.Context, q string, args ...any) (int64, error) {
			return scanInt(ctx, db, q, args...)
		},
		TxExec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		},
		TxQueryInt: func(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
			return scanInt(ctx, tx, q, args...)
		},
	}
}

func TestSuite_MariaDB(t *testing.T) {
	db, _ := mysqlDB(t)
	fencetest.Run(t, harness("mariadb", db, sqlfence.MySQL))
}

func TestSuite_SQLite(t *testing.T) {
	db, _ := sqliteDB(t)
	fencetest.Run(t, harness("sqlite", db, sqlfence.SQLite))
}
