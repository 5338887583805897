package fencemark_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/fencemark"
	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/pgrepltest"
	"github.com/fencegate/fencegate/migrations"
)

func TestRaiseAll(t *testing.T) {
	for _, o := range backends() {
		t.Run(o.name, func(t *testing.T) {
			b := o.open(t)
			ctx := t.Context()
			for res, tok := range map[string]fence.Token{"low-a": 5, "low-b": 19, "high": 50} {
				if _, _, err := fencemark.Raise(ctx, b.db, b.d, res, tok); err != nil {
					t.Fatal(err)
				}
			}
			n, err := fencemark.RaiseAll(ctx, b.db, b.d, 20)
			if err != nil || n != 2 {
				t.Fatalf("RaiseAll = %d, %v; want 2 raised", n, err)
			}
			for res, want := range map[string]fence.Token{"low-a": 20, "low-b": 20, "high": 50, "none": 0} {
				if got, err := fencemark.Read(ctx, b.db, b.d, res); err != nil || got != want {
					t.Errorf("mark of %s = %d, %v; want %d", res, got, err, want)
				}
			}
		})
	}
}

func TestRaiseAll_invalid(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tests := []struct {
		name string
		db   *sql.DB
		d    migrations.Dialect
		tok  fence.Token
	}{
		{"nil db", nil, migrations.Postgres, 1},
		{"zero token", db, migrations.Postgres, 0},
		{"unknown dialect", db, migrations.Dialect(99), 1},
	}
	for _, tt := range tests {
		if _, err := fencemark.RaiseAll(t.Context(), tt.db, tt.d, tt.tok); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("%s: %v, want fence.ErrInvalidArgument", tt.name, err)
		}
	}
}

// TestRaiseAll_afterFailover: A writes at token 33, B at 34 and is acknowledged, the
// asynchronous primary dies before B's write reached the standby, the standby is
// promoted: the mark is back at 33 and would take A's stale write. RaiseAll to the
// next token (35) refuses A, and B, granted before the failover too; 35 writes.
func TestRaiseAll_afterFailover(t *testing.T) {
	ctx := t.Context()
	pair := pgrepltest.Start(t, pgrepltest.Async)
	primary := replStore(t, pair.Primary.DSN(), true)
	if _, err := primary.pool.Exec(ctx, "CREATE TABLE acct (id int PRIMARY KEY, owner bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	write := func(s *pgStore, tok fence.Token) error {
		return s.store.Fenced(ctx, fence.NewGrant("acct-1", tok), func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO acct VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET owner = $1", int64(tok))
			return err
		})
	}
	if err := write(primary, 33); err != nil {
		t.Fatalf("A at 33: %v", err)
	}
	pair.WaitReplayed(t)
	pair.HoldReplication()
	if err := write(primary, 34); err != nil {
		t.Fatalf("B at 34: %v", err)
	}
	primary.pool.Close()
	pair.KillPrimary(t)
	pair.Promote(t)

	promoted := replStore(t, pair.Standby.DSN(), false)
	db, err := sql.Open("pgx", pair.Standby.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if mark, err := fencemark.Read(ctx, db, migrations.Postgres, "acct-1"); err != nil || mark != 33 {
		t.Fatalf("mark after failover = %d, %v; want 33 (B's write lost)", mark, err)
	}
	if n, err := fencemark.RaiseAll(ctx, db, migrations.Postgres, 35); err != nil || n != 1 {
		t.Fatalf("RaiseAll = %d, %v; want 1", n, err)
	}
	for _, tok := range []fence.Token{33, 34} {
		if err := write(promoted, tok); !errors.Is(err, fence.ErrStale) {
			t.Errorf("write at %d after the bulk fence: %v, want fence.ErrStale", tok, err)
		}
	}
	if err := write(promoted, 35); err != nil {
		t.Errorf("write at the next token: %v", err)
	}
	var owner int64
	if err := promoted.pool.QueryRow(ctx, "SELECT owner FROM acct WHERE id = 1").Scan(&owner); err != nil || owner != 35 {
		t.Errorf("owner = %d, %v; want 35", owner, err)
	}
}

type pgStore struct {
	pool  *pgxpool.Pool
	store *pgxfence.Store
}

// replStore opens a pool and a pgxfence Store on dsn, migrating it first if migrate.
func replStore(t *testing.T, dsn string, migrate bool) *pgStore {
	t.Helper()
	if migrate {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := migrations.Up(t.Context(), db, migrations.Postgres); err != nil {
			t.Fatal(err)
		}
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := pgxfence.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	return &pgStore{pool, store}
}
