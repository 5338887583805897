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

// Server settings. Durable: a commit is acknowledged only once its log record has
// been written to the kernel (PostgreSQL synchronous_commit = on; MariaDB
// innodb_flush_log_at_trx_commit = 2, no binary log), so a server killed and
// restarted from its data keeps every acknowledged commit. Not flushed to the disk
// (fsync = off; the log flushed once a second): a container kill keeps the host's
// page cache, and power loss is not tested (see the package doc). Dead peers: TCP
// keepalives end within seconds a session whose worker went away while cut off
// (its FIN lost), which would otherwise hold its row locks for hours.
var (
	pgSettings = []string{
		"-c", "synchronous_commit=on", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "tcp_keepalives_idle=2", "-c", "tcp_keepalives_interval=1", "-c", "tcp_keepalives_count=3",
	}
	mariadbSettings = []string{
		"--innodb-flush-log-at-trx-commit=2", "--skip-log-bin",
		"--tcp-keepalive-time=2", "--tcp-keepalive-interval=1", "--tcp-keepalive-probes=3",
	}
)

// startDatabase starts the database container on the database network and connects
// the host to it through its published port.
func (e *Env) startDatabase() {
	opts := &dockertest.RunOptions{Name: e.name("db"), NetworkID: e.dbNet.Network.ID}
	port := "5432/tcp"
	switch e.Database {
	case Postgres:
		opts.Repository, opts.User = e.images.Postgres, "postgres"
		opts.Cmd = append([]string{pgBin + "/postgres", "-D", pgData}, pgSettings...)
	case MariaDB:
		port = "3306/tcp"
		opts.Repository = e.images.MariaDB
		opts.Cmd = append([]string{"/usr/sbin/mariadbd", "--no-defaults", "--user=mysql", "--datadir=/var/lib/mysql",
			"--socket=/run/mysqld/mysqld.sock", "--bind-address=0.0.0.0", "--port=3306",
			"--init-file=" + mariadbInit, "--skip-name-resolve", "--max-connections=300"}, mariadbSettings...)
	}
	e.dbRes = e.run(opts, port)
	e.dbPort = port
	e.connectDB()
}

// connectDB (re)connects the host to the database through the port it is published
// on now, which changes when the container restarts or rejoins its network, and
// waits until it answers.
func (e *Env) connectDB() {
	e.t.Helper()
	hostPort, err := e.hostPort(e.dbRes, e.dbPort)
	if err != nil {
		e.t.Fatal(err)
	}
	driver, dsn := "pgx", "postgres://postgres@127.0.0.1:"+hostPort+"/postgres?sslmode=disable"
	if e.Database == MariaDB {
		driver, dsn = "mysql", "billing@tcp(127.0.0.1:"+hostPort+")/billing"
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
	if e.DB != nil {
		e.DB.Close()
	}
	e.DB = db
}

// WorkerDSN is how containers on the database network reach the database. The
// MySQL driver's COMMIT takes no context, so on MariaDB only a read timeout ends a
// COMMIT whose reply never comes; it is well above any lock wait the scenarios
// cause. pgx ends it with the transaction's context.
func (e *Env) WorkerDSN() string {
	if e.Database == MariaDB {
		return "mysql://billing@tcp(" + e.name("db") + ":3306)/billing?timeout=5s&readTimeout=15s&writeTimeout=15s"
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
