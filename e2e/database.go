//go:build e2e

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/go-sql-driver/mysql" // the host's connection to MariaDB
	_ "github.com/jackc/pgx/v5/stdlib" // the host's connection to PostgreSQL
	"github.com/ory/dockertest/v3"
)

// Database is the database a topology runs.
type Database int

const (
	// Postgres is PostgreSQL 15; the workers write through pgxfence.
	Postgres Database = iota
	// MariaDB is MariaDB 10.11; the workers write through sqlfence's MySQL dialect.
	MariaDB
)

func (d Database) String() string {
	if d == MariaDB {
		return "MariaDB 10.11"
	}
	return "PostgreSQL 15"
}

// startDatabase starts the database container on the database network and connects
// the host to it through its published port.
func (e *Env) startDatabase() {
	opts := &dockertest.RunOptions{Name: e.name("db"), NetworkID: e.dbNet.Network.ID}
	port, driver := "5432/tcp", "pgx"
	switch e.Database {
	case Postgres:
		opts.Repository, opts.User = e.images.Postgres, "postgres"
		opts.Cmd = []string{pgBin + "/postgres", "-D", pgData}
	case MariaDB:
		port, driver = "3306/tcp", "mysql"
		opts.Repository = e.images.MariaDB
		opts.Cmd = []string{"/usr/sbin/mariadbd", "--no-defaults", "--user=mysql", "--datadir=/var/lib/mysql",
			"--socket=/run/mysqld/mysqld.sock", "--bind-address=0.0.0.0", "--port=3306",
			"--init-file=" + mariadbInit, "--skip-name-resolve", "--skip-log-bin",
			// Durability is not under test, the fence is.
			"--innodb-flush-log-at-trx-commit=0", "--max-connections=300"}
	}
	e.dbRes = e.run(opts, port)
	hostPort, err := e.hostPort(e.dbRes, port)
	if err != nil {
		e.t.Fatal(err)
	}
	dsn := "postgres://postgres@127.0.0.1:" + hostPort + "/postgres?sslmode=disable"
	if e.Database == MariaDB {
		dsn = "billing@tcp(127.0.0.1:" + hostPort + ")/billing"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { db.Close() })
	err = e.pool.Retry(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
	if err != nil {
		e.t.Fatalf("%s did not come up: %v", e.Database, err)
	}
	e.DB = db
}

// WorkerDSN is how containers on the database network reach the database.
func (e *Env) WorkerDSN() string {
	if e.Database == MariaDB {
		return "mysql://billing@tcp(" + e.name("db") + ":3306)/billing?timeout=5s"
	}
	return "postgres://postgres@" + e.name("db") + ":5432/postgres?sslmode=disable&connect_timeout=5"
}

// tokensColumn reads billing_accounts.tokens as comma-separated text on both
// databases (PostgreSQL keeps a bigint[]).
func (e *Env) tokensColumn() string {
	if e.Database == MariaDB {
		return "tokens"
	}
	return "array_to_string(tokens, ',')"
}

// lockWaits counts transactions waiting for a row lock.
func (e *Env) lockWaits(ctx context.Context) (int, error) {
	q := `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`
	if e.Database == MariaDB {
		q = `SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'`
	}
	var n int
	err := e.DB.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

// account reads one billing_accounts row.
func (e *Env) account(ctx context.Context, name string) (Row, error) {
	var r Row
	var tokens string
	ph := "$1"
	if e.Database == MariaDB {
		ph = "?"
	}
	err := e.DB.QueryRowContext(ctx, fmt.Sprintf(`SELECT balance, %s FROM billing_accounts WHERE account = %s`, e.tokensColumn(), ph), name).Scan(&r.Balance, &tokens)
	if err != nil {
		return r, err
	}
	r.Tokens, err = parseTokens(tokens)
	return r, err
}
