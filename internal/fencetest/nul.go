package fencetest

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

// Builders is what RefusesNUL needs of an adapter: the row writers and the guard.
type Builders interface {
	fence.RowWriter
	fence.Guard
}

// RefusesNUL checks that every builder of s (Insert, Update, Upsert, Delete,
// Decrement) refuses a table, key, column or token column name holding a NUL byte
// with fence.ErrInvalidIdentifier: no database can name it, so it must be refused
// before anything is sent. table and keyColumn name a table the test made; the
// other names are valid, so only the NUL can cause the refusal.
func RefusesNUL(t *testing.T, s Builders, table, keyColumn string) {
	t.Helper()
	ctx := t.Context()
	nul := "x\x00y"
	row := fence.Row{Table: table, Key: []fence.Col{fence.C(keyColumn, "a")}}
	nulTable := fence.Row{Table: nul, Key: row.Key}
	nulKey := fence.Row{Table: row.Table, Key: []fence.Col{fence.C(nul, "a")}}
	g := fence.NewGrant("nul", 1)
	decrement := func(c fence.Counter) error {
		_, err := s.Decrement(ctx, c, 1)
		return err
	}
	for what, err := range map[string]error{
		"Insert table":     s.Insert(ctx, nul, fence.C("a", 1)),
		"Insert column":    s.Insert(ctx, table, fence.C(nul, 1)),
		"Update table":     s.Update(ctx, g, nulTable, fence.C("v", 1)),
		"Update key":       s.Update(ctx, g, nulKey, fence.C("v", 1)),
		"Update set":       s.Update(ctx, g, row, fence.C(nul, 1)),
		"Update token":     s.Update(ctx, g, fence.Row{Table: row.Table, Key: row.Key, TokenColumn: nul}, fence.C("v", 1)),
		"Upsert table":     s.Upsert(ctx, g, nulTable, fence.C("v", 1)),
		"Upsert set":       s.Upsert(ctx, g, row, fence.C(nul, 1)),
		"Delete table":     s.Delete(ctx, g, nulTable),
		"Delete key":       s.Delete(ctx, g, nulKey),
		"Decrement table":  decrement(fence.Counter{Table: nul, Key: row.Key, Column: "n"}),
		"Decrement column": decrement(fence.Counter{Table: row.Table, Key: row.Key, Column: nul}),
	} {
		if !errors.Is(err, fence.ErrInvalidIdentifier) {
			t.Errorf("%s with a NUL byte: %v, want ErrInvalidIdentifier", what, err)
		}
	}
}
