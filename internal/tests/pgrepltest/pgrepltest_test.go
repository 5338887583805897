package pgrepltest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/internal/tests/pgrepltest"
)

func connect(t *testing.T, dsn string, cfg func(*pgx.ConnConfig)) *pgx.Conn {
	t.Helper()
	c, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		cfg(c)
	}
	conn, err := pgx.ConnectConfig(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func count(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(t.Context(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPair_async_failoverLosesCommit checks the harness makes the failure it exists
// for: a commit acknowledged by an asynchronous primary is gone after the failover.
func TestPair_async_failoverLosesCommit(t *testing.T) {
	ctx := t.Context()
	p := pgrepltest.Start(t, pgrepltest.Async)
	primary := connect(t, p.Primary.DSN(), nil)
	if _, err := primary.Exec(ctx, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	p.WaitReplayed(t)
	p.HoldReplication()
	if _, err := primary.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err) // acknowledged
	}
	p.KillPrimary(t)
	p.Promote(t)
	promoted := connect(t, p.Standby.DSN(), nil)
	if n := count(t, promoted); n != 1 {
		t.Fatalf("rows after failover = %d, want 1 (the acknowledged second insert lost)", n)
	}
	if _, err := promoted.Exec(ctx, "INSERT INTO t VALUES (3)"); err != nil {
		t.Fatalf("the promoted standby refuses writes: %v", err)
	}
}

// TestPair_sync_cancelWait checks that a COMMIT waiting for the synchronous standby,
// once cancelled, commits locally and says so only in a WARNING.
func TestPair_sync_cancelWait(t *testing.T) {
	ctx := t.Context()
	p := pgrepltest.Start(t, pgrepltest.Sync)
	warnings := make(chan string, 4)
	primary := connect(t, p.Primary.DSN(), func(c *pgx.ConnConfig) {
		c.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { warnings <- n.Message }
	})
	if _, err := primary.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
		t.Fatal(err)
	}
	p.HoldReplication()
	done := make(chan error, 1)
	go func() { _, err := primary.Exec(ctx, "INSERT INTO t VALUES (1)"); done <- err }()
	if n := p.CancelSyncWaits(t); n != 1 {
		t.Fatalf("cancelled %d waits, want 1", n)
	}
	if err := <-done; err != nil {
		t.Fatalf("insert after a cancelled wait: %v, want nil (committed locally)", err)
	}
	select {
	case w := <-warnings:
		t.Logf("warning: %s", w)
	default:
		t.Fatal("no WARNING about the cancelled wait")
	}
	p.ResumeReplication()
	if n := count(t, primary); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}
}
