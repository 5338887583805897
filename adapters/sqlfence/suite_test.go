package sqlfence_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
)

func harness(name string, db *sql.DB, store *sqlfence.Store) fencetest.Harness[*sql.Tx] {
	rebind := func(q string) string { return q }
	if store.Dialect() == migrations.Postgres {
		rebind = dollars
	}
	return fencetest.Harness[*sql.Tx]{
		Name:  name,
		Store: store,
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := db.ExecContext(ctx, rebind(q), args...)
			return err
		},
		QueryInt: func(ctx context.Context, q string, args ...any) (int64, error) {
			return scanInt(ctx, db, rebind(q), args...)
		},
		TxExec: func(ctx context.Context, tx *sql.Tx, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, rebind(q), args...)
			return err
		},
		TxQueryInt: func(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
			return scanInt(ctx, tx, rebind(q), args...)
		},
		FenceFirst: true, // Fenced raises the fence between BEGIN and fn
	}
}

func TestSuite_MariaDB(t *testing.T) {
	db, _ := mysqlDB(t)
	fencetest.Run(t, harness("mariadb", db, newStore(db, migrations.MySQL)))
}

// TestSuite_MariaDB_isolation runs the suite again with InnoDB's other common levels.
func TestSuite_MariaDB_isolation(t *testing.T) {
	for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelSerializable} {
		t.Run(level.String(), func(t *testing.T) {
			db, _ := mysqlDB(t)
			store, err := sqlfence.New(db, migrations.MySQL, sqlfence.WithTxOptions(sql.TxOptions{Isolation: level}))
			if err != nil {
				t.Fatal(err)
			}
			fencetest.Run(t, harness("mariadb "+level.String(), db, store))
		})
	}
}

func TestSuite_SQLite(t *testing.T) {
	db, _ := sqliteDB(t)
	fencetest.Run(t, harness("sqlite", db, newStore(db, migrations.SQLite)))
}

// TestSuite_Postgres runs the suite on PostgreSQL through database/sql (pgx's stdlib
// driver), at the default READ COMMITTED and at REPEATABLE READ, where a concurrent
// raise is a serialization failure the Store begins again from.
func TestSuite_Postgres(t *testing.T) {
	for _, level := range []sql.IsolationLevel{sql.LevelDefault, sql.LevelRepeatableRead} {
		t.Run(level.String(), func(t *testing.T) {
			db, _ := postgresDB(t)
			store, err := sqlfence.New(db, migrations.Postgres, sqlfence.WithTxOptions(sql.TxOptions{Isolation: level}))
			if err != nil {
				t.Fatal(err)
			}
			fencetest.Run(t, harness("postgres "+level.String(), db, store))
		})
	}
}
