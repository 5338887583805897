package sqlfence_test

import (
	"database/sql"
	"testing"

	"github.com/fencegate/fencegate/adapters/sqlfence"
	"github.com/fencegate/fencegate/adapters/sqlfence/mysql"
	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/tests/fencetest"
	"github.com/fencegate/fencegate/migrations"
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

// TestStore_nilAndZeroInputs sweeps every entry point with a nil Store (New refuses a
// nil *sql.DB and an unknown dialect: TestNew), a typed nil grant, zero
// Rows and Counters and nil functions: each returns its documented error before any I/O (the pool points at a
// closed port), and none panics.
func TestStore_nilAndZeroInputs(t *testing.T) {
	ctx := t.Context()
	unreachable, err := mysql.Open("u:p@tcp(127.0.0.1:1)/none?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unreachable.Close() })
	var (
		nilStore *sqlfence.Store
		nilGrant *nilLock
	)
	live := fence.NewGrant("r", 1)
	row := fence.Row{Table: "t", Key: []fence.Col{{Name: "id", Value: 1}}}
	txFn := func(*sql.Tx) error { return nil }
	keyFn := func(*sql.Tx) ([]byte, error) { return nil, nil }
	stores := []struct {
		name string
		s    *sqlfence.Store
		want error
	}{
		{"nil Store", nilStore, fence.ErrInvalidArgument},
	}
	type call struct {
		name string
		run  func(s *sqlfence.Store) error
		want error // for the calls below; every entry point's is its store's
	}
	everyEntry := []call{
		{"Fenced", func(s *sqlfence.Store) error { return s.Fenced(ctx, live, txFn) }, nil},
		{"fence.Exec", func(s *sqlfence.Store) error { return fence.Exec(ctx, s, live, txFn) }, nil},
		{"Update", func(s *sqlfence.Store) error { return s.Update(ctx, live, row, fence.Col{Name: "v", Value: 1}) }, nil},
		{"Upsert", func(s *sqlfence.Store) error { return s.Upsert(ctx, live, row) }, nil},
		{"Delete", func(s *sqlfence.Store) error { return s.Delete(ctx, live, row) }, nil},
		{"Decrement", func(s *sqlfence.Store) error {
			_, err := s.Decrement(ctx, nolock.Counter{Table: "t", Key: row.Key, Column: "n"}, 1)
			return err
		}, nil},
		{"Insert", func(s *sqlfence.Store) error { return s.Insert(ctx, "t", fence.Col{Name: "id", Value: 1}) }, nil},
		{"Once", func(s *sqlfence.Store) error { _, err := s.Once(ctx, "k", "fp", keyFn); return err }, nil},
		{"PurgeExpiredKeys", func(s *sqlfence.Store) error { _, err := s.PurgeExpiredKeys(ctx); return err }, nil},
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
	for _, st := range stores {
		for _, c := range everyEntry {
			t.Run(st.name+"/"+c.name, func(t *testing.T) { check(t, func() error { return c.run(st.s) }, st.want) })
		}
	}
	s := newStore(unreachable, migrations.MySQL)
	bad := []call{
		{"Fenced typed nil grant", func(s *sqlfence.Store) error { return s.Fenced(ctx, nilGrant, txFn) }, fence.ErrInvalidArgument},
		{"fence.Exec typed nil grant", func(s *sqlfence.Store) error { return fence.Exec(ctx, s, nilGrant, txFn) }, fence.ErrInvalidArgument},
		{"Fenced nil fn", func(s *sqlfence.Store) error { return s.Fenced(ctx, live, nil) }, fence.ErrInvalidArgument},
		{"Update typed nil grant", func(s *sqlfence.Store) error { return s.Update(ctx, nilGrant, row, fence.Col{Name: "v", Value: 1}) }, fence.ErrInvalidArgument},
		{"Upsert typed nil grant", func(s *sqlfence.Store) error { return s.Upsert(ctx, nilGrant, row) }, fence.ErrInvalidArgument},
		{"Delete typed nil grant", func(s *sqlfence.Store) error { return s.Delete(ctx, nilGrant, row) }, fence.ErrInvalidArgument},
		{"Update zero Row", func(s *sqlfence.Store) error { return s.Update(ctx, live, fence.Row{}, fence.Col{Name: "v", Value: 1}) }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Upsert zero Row", func(s *sqlfence.Store) error { return s.Upsert(ctx, live, fence.Row{}) }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Delete zero Row", func(s *sqlfence.Store) error { return s.Delete(ctx, live, fence.Row{}) }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Decrement zero Counter", func(s *sqlfence.Store) error { _, err := s.Decrement(ctx, nolock.Counter{}, 1); return err }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Insert no table", func(s *sqlfence.Store) error { return s.Insert(ctx, "") }, fencetest.Invalid("invalid identifier: empty table name")},
		{"Once nil fn", func(s *sqlfence.Store) error { _, err := s.Once(ctx, "k", "fp", nil); return err }, fence.ErrInvalidArgument},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) { check(t, func() error { return c.run(s) }, c.want) })
	}
}
