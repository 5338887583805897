package pgbouncertest_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/adapters/pgxfence/pgtest"
	"github.com/fencegate/fencegate/internal/tests/pgbouncertest"
)

var (
	postgres = pgtest.New()
	bouncer  = pgbouncertest.New(postgres, 1)
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := bouncer.Close(); err != nil {
		println(err.Error())
	}
	if err := postgres.Close(); err != nil {
		println(err.Error())
	}
	os.Exit(code)
}

// TestServer_DSN_transactionPooling checks that two clients connected at once share
// PgBouncer's one server connection: in session pooling the second would wait for the
// first to disconnect.
func TestServer_DSN_transactionPooling(t *testing.T) {
	ctx := t.Context()
	dsn := bouncer.DSN(t)
	pids := make([]int32, 2)
	for i := range pids {
		c, err := pgx.Connect(ctx, dsn+"&default_query_exec_mode=exec")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pids[i]); err != nil {
			t.Fatal(err)
		}
	}
	if pids[0] != pids[1] {
		t.Fatalf("backend pids %v: two server connections for a pool of one", pids)
	}
}
