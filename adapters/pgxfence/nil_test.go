package pgxfence_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/adapters/pgxfence"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/nolock"
)

// nilLock is a grant type with pointer receivers that dereference, as
// *lockclient.Lock's do: a nil one must be refused, not called.
type nilLock struct {
	res string
	tok fence.Token
}

func (l *nilLock) Resource() string   { return l.res }
func (l *nilLock) Token() fence.Token { return l.tok }

// TestStore_nilAndZeroInputs sweeps every entry point with a nil Store, a typed nil
// grant, zero Rows and Counters and nil functions: each
// returns its documented error before any I/O (the pool points at a closed port), and
// none panics.
func TestStore_nilAndZeroInputs(t *testing.T) {
	ctx := t.Context()
	unreachable, err := pgxpool.New(ctx, "postgres://fencegate@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unreachable.Close)
	var (
		nilStore *pgxfence.Store
		nilGrant *nilLock
	)
	live := fence.NewGrant("r", 1)
	row := fence.Row{Table: "t", Key: []fence.Col{{Name: "id", Value: 1}}}
	txFn := func(pgx.Tx) error { return nil }
	keyFn := func(pgx.Tx) ([]byte, error) { return nil, nil }
	stores := map[string]*pgxfence.Store{"nil Store": nilStore}
	type call struct {
		name string
		run  func(s *pgxfence.Store) error
		want error
	}
	everyEntry := []call{
		{"Fenced", func(s *pgxfence.Store) error { return s.Fenced(ctx, live, txFn) }, fence.ErrInvalidArgument},
		{"fence.Exec", func(s *pgxfence.Store) error { return fence.Exec(ctx, s, live, txFn) }, fence.ErrInvalidArgument},
		{"Update", func(s *pgxfence.Store) error { return s.Update(ctx, live, row, fence.Col{Name: "v", Value: 1}) }, fence.ErrInvalidArgument},
		{"Upsert", func(s *pgxfence.Store) error { return s.Upsert(ctx, live, row) }, fence.ErrInvalidArgument},
		{"Delete", func(s *pgxfence.Store) error { return s.Delete(ctx, live, row) }, fence.ErrInvalidArgument},
		{"Decrement", func(s *pgxfence.Store) error {
			_, err := s.Decrement(ctx, nolock.Counter{Table: "t", Key: row.Key, Column: "n"}, 1)
			return err
		}, fence.ErrInvalidArgument},
		{"Insert", func(s *pgxfence.Store) error { return s.Insert(ctx, "t", fence.Col{Name: "id", Value: 1}) }, fence.ErrInvalidArgument},
		{"Once", func(s *pgxfence.Store) error { _, err := s.Once(ctx, "k", "fp", keyFn); return err }, fence.ErrInvalidArgument},
		{"PurgeExpiredKeys", func(s *pgxfence.Store) error { _, err := s.PurgeExpiredKeys(ctx); return err }, fence.ErrInvalidArgument},
	}
	check := func(t *testing.T, run func() error, want error) {
		t.Helper()
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("panicked: %v", p)
			}
		}()
		if err := run(); !fencetest.Match(err, want) {
			t.Fatalf("error = %v, want %v", err, want)
		}
	}
	for sname, s := range stores {
		for _, c := range everyEntry {
			t.Run(sname+"/"+c.name, func(t *testing.T) { check(t, func() error { return c.run(s) }, c.want) })
		}
	}
	s := newStore(unreachable)
	bad := []call{
		{"Fenced typed nil grant", func(s *pgxfence.Store) error { return s.Fenced(ctx, nilGrant, txFn) }, fence.ErrInvalidArgument},
		{"fence.Exec typed nil grant", func(s *pgxfence.Store) error { return fence.Exec(ctx, s, nilGrant, txFn) }, fence.ErrInvalidArgument},
		{"Fenced nil fn", func(s *pgxfence.Store) error { return s.Fenced(ctx, live, nil) }, fence.ErrInvalidArgument},
		{"Update typed nil grant", func(s *pgxfence.Store) error { return s.Update(ctx, nilGrant, row, fence.Col{Name: "v", Value: 1}) }, fence.ErrInvalidArgument},
		{"Upsert typed nil grant", func(s *pgxfence.Store) error { return s.Upsert(ctx, nilGrant, row) }, fence.ErrInvalidArgument},
		{"Delete typed nil grant", func(s *pgxfence.Store) error { return s.Delete(ctx, nilGrant, row) }, fence.ErrInvalidArgument},
		{"Update zero Row", func(s *pgxfence.Store) error { return s.Update(ctx, live, fence.Row{}, fence.Col{Name: "v", Value: 1}) }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Upsert zero Row", func(s *pgxfence.Store) error { return s.Upsert(ctx, live, fence.Row{}) }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Delete zero Row", func(s *pgxfence.Store) error { return s.Delete(ctx, live, fence.Row{}) }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Decrement zero Counter", func(s *pgxfence.Store) error { _, err := s.Decrement(ctx, nolock.Counter{}, 1); return err }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Insert no table", func(s *pgxfence.Store) error { return s.Insert(ctx, "") }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Once nil fn", func(s *pgxfence.Store) error { _, err := s.Once(ctx, "k", "fp", nil); return err }, fence.ErrInvalidArgument},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) { check(t, func() error { return c.run(s) }, c.want) })
	}
}

// poolWrapper is a caller's type around a pool: neither a pool nor a pgx.Tx.
type poolWrapper struct{ *pgxpool.Pool }

// TestNew_unusableDB checks that New refuses a nil DB, a typed nil pool (a failed
// pgxpool.New's) and a DB of another type (not silently given a caller's-transaction,
// savepoint, store) with fence.ErrInvalidArgument and a nil Store.
func TestNew_unusableDB(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://fencegate@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var (
		nilPool *pgxpool.Pool
		nilConn *pgx.Conn
	)
	for name, db := range map[string]pgxfence.DB{
		"nil":            nil,
		"typed nil pool": nilPool,
		"typed nil conn": nilConn,
		"wrapper":        poolWrapper{pool},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := pgxfence.New(db)
			if !errors.Is(err, fence.ErrInvalidArgument) || s != nil {
				t.Fatalf("New(%s) = %v, %v; want nil, ErrInvalidArgument", name, s, err)
			}
		})
	}
}
