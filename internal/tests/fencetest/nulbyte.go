package fencetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// Builders is what RefusesNUL needs of an adapter: the row writers and the guard.
type Builders interface {
	RowWriter
	Guard
}

// RefusesNUL checks that every builder of s (Insert, Update, Upsert, Delete,
// Decrement) refuses a table, key, column or token column name holding a NUL byte
// with an error wrapping fence.ErrInvalidArgument that says so: no database can name it, so it must be refused
// before anything is sent. table and keyColumn name a table the test made; the
// other names are valid, so only the NUL can cause the refusal.
func RefusesNUL(t *testing.T, s Builders, table, keyColumn string) {
	t.Helper()
	ctx := t.Context()
	nul := "x\x00y"
	row := fence.Row{Table: table, Key: []fence.Col{{Name: keyColumn, Value: "a"}}}
	nulTable := fence.Row{Table: nul, Key: row.Key}
	nulKey := fence.Row{Table: row.Table, Key: []fence.Col{{Name: nul, Value: "a"}}}
	g := fence.NewGrant("nul", 1)
	decrement := func(c nolock.Counter) error {
		_, err := s.Decrement(ctx, c, 1)
		return err
	}
	for what, err := range map[string]error{
		"Insert table":     s.Insert(ctx, nul, fence.Col{Name: "a", Value: 1}),
		"Insert column":    s.Insert(ctx, table, fence.Col{Name: nul, Value: 1}),
		"Update table":     s.Update(ctx, g, nulTable, fence.Col{Name: "v", Value: 1}),
		"Update key":       s.Update(ctx, g, nulKey, fence.Col{Name: "v", Value: 1}),
		"Update set":       s.Update(ctx, g, row, fence.Col{Name: nul, Value: 1}),
		"Update token":     s.Update(ctx, g, fence.Row{Table: row.Table, Key: row.Key, TokenColumn: nul}, fence.Col{Name: "v", Value: 1}),
		"Upsert table":     s.Upsert(ctx, g, nulTable, fence.Col{Name: "v", Value: 1}),
		"Upsert set":       s.Upsert(ctx, g, row, fence.Col{Name: nul, Value: 1}),
		"Delete table":     s.Delete(ctx, g, nulTable),
		"Delete key":       s.Delete(ctx, g, nulKey),
		"Decrement table":  decrement(nolock.Counter{Table: nul, Key: row.Key, Column: "n"}),
		"Decrement column": decrement(nolock.Counter{Table: row.Table, Key: row.Key, Column: nul}),
	} {
		if !errors.Is(err, fence.ErrInvalidArgument) || err == nil || !strings.Contains(err.Error(), "contains a NUL byte") {
			t.Errorf("%s with a NUL byte: %v, want fence.ErrInvalidArgument saying it contains a NUL byte", what, err)
		}
	}
}
