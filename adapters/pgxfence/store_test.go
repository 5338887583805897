package pgxfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
)

// newStore is pgxfence.New for a db and options the test knows to be valid.
func newStore(db pgxfence.DB, opts ...pgxfence.Option) *pgxfence.Store {
	s, err := pgxfence.New(db, opts...)
	if err != nil {
		panic(err)
	}
	return s
}

func mustExec(t testing.TB, db pgxfence.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func mustInt(t testing.TB, db queryRower, q string, args ...any) int64 {
	t.Helper()
	v, err := queryInt(t.Context(), db, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func stored(t testing.TB, db queryRower, res string) fence.Token {
	t.Helper()
	v, err := queryInt(t.Context(), db, "SELECT token FROM fence_tokens WHERE resource = $1", res)
	if errors.Is(err, fence.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fence.Token(v)
}

func wantStale(t testing.TB, err error, presented, seen fence.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("error = %v, want a *fence.StaleError", err)
	}
	if se.Presented != presented || se.Seen != seen {
		t.Fatalf("StaleError = %+v, want presented %d, seen %d", se, presented, seen)
	}
}

// invoice writes the account's invoice total inside a fenced transaction, as the job
// of the GC-pause timeline does.
func invoice(s *pgxfence.Store, res string, tok fence.Token, total int64) error {
	ctx := context.Background()
	return s.Fenced(ctx, fence.NewGrant(res, tok), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE invoices SET total = $1, written_by = $2 WHERE account = 42", total, int64(tok))
		return err
	})
}

func invoicesTable(t testing.TB, db pgxfence.DB) {
	t.Helper()
	mustExec(t, db, "CREATE TABLE invoices (account BIGINT PRIMARY KEY, total BIGINT NOT NULL, written_by BIGINT NOT NULL DEFAULT 0)")
	mustExec(t, db, "INSERT INTO invoices (account, total) VALUES (42, 0)")
}

// TestStore_Fenced_variants runs the timeline (33 writes, 34 writes, 33's late write
// is refused) through every kind of DB a Store accepts.
func TestStore_Fenced_variants(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	ctx := t.Context()
	variants := []struct {
		name string
		db   func(t *testing.T) (pgxfence.DB, func())
	}{
		{"pool", func(t *testing.T) (pgxfence.DB, func()) { return pool, func() {} }},
		{"pgxpool.Conn", func(t *testing.T) (pgxfence.DB, func()) {
			c, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return c, c.Release
		}},
		{"pgx.Conn", func(t *testing.T) (pgxfence.DB, func()) {
			c, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
			if err != nil {
				t.Fatal(err)
			}
			return c, func() { c.Close(context.Background()) }
		}},
		{"pgx.Tx", func(t *testing.T) (pgxfence.DB, func()) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tx, func() {
				if err := tx.Commit(context.Background()); err != nil {
					t.Errorf("caller's commit: %v", err)
				}
			}
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			res := "account-42/" + v.name
			db, done := v.db(t)
			s := newStore(db)
			if err := invoice(s, res, 33, 100); err != nil {
				t.Fatalf("token 33: %v", err)
			}
			if err := invoice(s, res, 34, 200); err != nil {
				t.Fatalf("token 34: %v", err)
			}
			wantStale(t, invoice(s, res, 33, 999), 33, 34)
			// The refusal left the connection (or the caller's transaction) usable.
			if got := mustInt(t, db, "SELECT total FROM invoices WHERE account = 42"); got != 200 {
				t.Fatalf("total = %d after the stale write, want 200", got)
			}
			done()
			if got := mustInt(t, pool, "SELECT written_by FROM invoices WHERE account = 42"); got != 34 {
				t.Fatalf("written_by = %d, want 34", got)
			}
			if got := stored(t, pool, res); got != 34 {
				t.Fatalf("stored token = %d, want 34", got)
			}
		})
	}
}

// TestStore_Fenced_refusalKeepsPoolConnection proves a refusal does not cost the pool
// its connection: the aborted transaction (or, pipelined, the refused batch) is
// rolled back, not discarded.
func TestStore_Fenced_refusalKeepsPoolConnection(t *testing.T) {
	forEachMode(t, func(t *testing.T, store func(pgxfence.DB) *pgxfence.Store) {
		cfg := newPool(t).Config()
		cfg.MaxConns, cfg.MinConns = 1, 0
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		invoicesTable(t, pool)
		s := store(pool)
		if err := invoice(s, "r", 10, 1); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			wantStale(t, invoice(s, "r", 9, 2), 9, 10)
		}
		if n := pool.Stat().NewConnsCount(); n != 1 {
			t.Fatalf("pool opened %d connections for 20 refusals, want 1", n)
		}
	})
}

// TestStore_Fenced_callerTx checks the savepoint semantics inside a caller's
// transaction: a refusal keeps the caller's earlier work, nothing is visible before
// the caller commits, and the caller's rollback undoes the fence raise too.
func TestStore_Fenced_callerTx(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	ctx := t.Context()
	if err := invoice(newStore(pool), "r", 20, 1); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	mustExec(t, tx, "INSERT INTO invoices (account, total) VALUES (7, 70)")
	s := newStore(tx)
	wantStale(t, invoice(s, "r", 19, 2), 19, 20)
	if got := mustInt(t, tx, "SELECT total FROM invoices WHERE account = 7"); got != 70 {
		t.Fatalf("caller's earlier insert lost after a refusal: total %d", got)
	}
	boom := errors.New("job failed")
	err = s.Fenced(ctx, fence.NewGrant("r", 21), func(tx pgx.Tx) error {
		mustExec(t, tx, "UPDATE invoices SET total = 3 WHERE account = 42")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Fenced() = %v, want fn's error", err)
	}
	if err := invoice(s, "r", 22, 4); err != nil {
		t.Fatal(err)
	}
	if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 1 {
		t.Fatalf("total seen outside = %d before the caller committed, want 1", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, pool, "r"); got != 20 {
		t.Fatalf("stored token = %d after the caller rolled back, want 20", got)
	}
}

func TestStore_Fenced_panicRollsBack(t *testing.T) {
	forEachMode(t, func(t *testing.T, store func(pgxfence.DB) *pgxfence.Store) {
		pool := newPool(t)
		invoicesTable(t, pool)
		s := store(pool)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the panic in fn did not reach the caller")
				}
			}()
			_ = s.Fenced(t.Context(), fence.NewGrant("r", 5), func(tx pgx.Tx) error {
				mustExec(t, tx, "UPDATE invoices SET total = 5 WHERE account = 42")
				panic("job panicked")
			})
		}()
		if got := mustInt(t, pool, "SELECT total FROM invoices WHERE account = 42"); got != 0 {
			t.Fatalf("total = %d after a panic, want 0", got)
		}
		if got := stored(t, pool, "r"); got != 0 {
			t.Fatalf("stored token = %d after a panic, want none", got)
		}
	})
}

// forEachMode runs body as a subtest for a Store in each mode: "fence-first" (BEGIN
// and the fence raise, then fn: WithFenceFirst) and "pipelined" (the default).
func forEachMode(t *testing.T, body func(t *testing.T, store func(pgxfence.DB) *pgxfence.Store)) {
	t.Helper()
	t.Run("fence-first", func(t *testing.T) {
		body(t, func(db pgxfence.DB) *pgxfence.Store { return fenceFirstStore(t, db) })
	})
	t.Run("pipelined", func(t *testing.T) { body(t, func(db pgxfence.DB) *pgxfence.Store { return newStore(db) }) })
}

func fenceFirstStore(t testing.TB, db pgxfence.DB) *pgxfence.Store {
	t.Helper()
	s, err := pgxfence.New(db, pgxfence.WithFenceFirst())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStore_Fenced_hostileResources sends resource names that would end or escape a
// badly quoted literal through the one-round-trip begin, also with
// standard_conforming_strings off (where backslashes escape in plain literals).
func TestStore_Fenced_hostileResources(t *testing.T) {
	pool := newPool(t)
	invoicesTable(t, pool)
	names := []string{
		`a'b`, `'`, `\`, `\'`, `\\'`, `a\'; DROP TABLE invoices; --`, `'); DROP TABLE invoices; --`,
		`$$`, `E'x'`, "ünïcødé 😀", "tab\tand\nnewline", strings.Repeat(`\'`, 200/2),
	}
	for _, scs := range []string{"on", "off"} {
		t.Run("standard_conforming_strings="+scs, func(t *testing.T) {
			cfg := pool.Config().ConnConfig.Copy()
			cfg.RuntimeParams["standard_conforming_strings"] = scs
			conn, err := pgx.ConnectConfig(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			s := newStore(conn)
			for i, name := range names {
				res := scs + "/" + name
				if len(res) > 200 {
					res = res[:200]
				}
				if err := invoice(s, res, fence.Token(100+i), 1); err != nil {
					t.Fatalf("%q: %v", res, err)
				}
				if got := stored(t, pool, res); got != fence.Token(100+i) {
					t.Fatalf("%q: stored token = %d, want %d (the name was altered on the way)", res, got, 100+i)
				}
				wantStale(t, invoice(s, res, 1, 1), 1, fence.Token(100+i))
			}
			if got := mustInt(t, pool, "SELECT count(*) FROM fence_tokens WHERE resource LIKE $1", scs+"/%"); got != int64(len(names)) {
				t.Fatalf("%d fence rows, want %d", got, len(names))
			}
		})
	}
}

func TestNew_invalidOption(t *testing.T) {
	pool := newPool(t)
	tests := []struct {
		name string
		db   pgxfence.DB
		opt  pgxfence.Option
	}{
		{"unknown isolation", pool, pgxfence.WithTxOptions(pgx.TxOptions{IsoLevel: "snapshot"})},
		{"read only", pool, pgxfence.WithTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly})},
		{"unknown access mode", pool, pgxfence.WithTxOptions(pgx.TxOptions{AccessMode: "write only"})},
		{"deferrable", pool, pgxfence.WithTxOptions(pgx.TxOptions{DeferrableMode: pgx.Deferrable})},
		{"begin query", pool, pgxfence.WithTxOptions(pgx.TxOptions{BeginQuery: "BEGIN"})},
		{"commit query", pool, pgxfence.WithTxOptions(pgx.TxOptions{CommitQuery: "COMMIT"})},
	}
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	tests = append(tests, struct {
		name string
		db   pgxfence.DB
		opt  pgxfence.Option
	}{"isolation inside a caller's tx", tx, pgxfence.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable})})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := pgxfence.New(tt.db, tt.opt)
			if !errors.Is(err, fence.ErrInvalidArgument) || s != nil {
				t.Fatalf("New() = %v, %v; want nil, fence.ErrInvalidArgument", s, err)
			}
			if !strings.Contains(err.Error(), "WithTxOptions") {
				t.Fatalf("New() error %q does not name the option", err)
			}
		})
	}
}

// TestNew_nilOption checks that a nil Option is ignored, among valid ones.
func TestNew_nilOption(t *testing.T) {
	pool := newPool(t)
	s, err := pgxfence.New(pool, nil, pgxfence.WithFenceFirst(), nil)
	if err != nil || s == nil {
		t.Fatalf("New(pool, nil, WithFenceFirst(), nil) = %v, %v; want a Store", s, err)
	}
}

// TestStore_Fenced_connInsideTransaction refuses a *pgx.Conn that is already inside
// a transaction: the fenced COMMIT would end the caller's transaction.
func TestStore_Fenced_connInsideTransaction(t *testing.T) {
	pool := newPool(t)
	conn, err := pgx.ConnectConfig(t.Context(), pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	mustExec(t, conn, "BEGIN")
	err = newStore(conn).Fenced(t.Context(), fence.NewGrant("r", 1), func(pgx.Tx) error { return nil })
	if !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("Fenced() = %v, want ErrInvalidArgument", err)
	}
	mustExec(t, conn, "ROLLBACK")
	if got := stored(t, pool, "r"); got != 0 {
		t.Fatalf("stored token = %d, want none", got)
	}
}

// TestStore_schemaMissing checks the error a database without the migrations gives.
func TestStore_schemaMissing(t *testing.T) {
	conn, err := pgx.Connect(t.Context(), postgres.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	mustExec(t, conn, "CREATE TABLE t (id INT PRIMARY KEY, val INT, fence_token BIGINT NOT NULL DEFAULT 0)")
	s := newStore(conn)
	g := fence.NewGrant("r", 1)
	if err := s.Fenced(t.Context(), g, func(pgx.Tx) error { return nil }); !errors.Is(err, fence.ErrSchema) {
		t.Fatalf("Fenced() = %v, want ErrSchema", err)
	}
	row := fence.Row{Table: "t", Key: []fence.Col{fence.Col{Name: "id", Value: 1}}}
	if err := s.Upsert(t.Context(), g, row, fence.Col{Name: "val", Value: 1}); !errors.Is(err, fence.ErrSchema) {
		t.Fatalf("Upsert() = %v, want ErrSchema", err)
	}
	if conn.PgConn().TxStatus() != 'I' {
		t.Fatal("connection left inside a transaction")
	}
}
