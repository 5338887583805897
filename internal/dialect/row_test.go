package dialect_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/internal/dialect"
	"github.com/fencegate/fencegate/nolock"
)

func TestCheckRow(t *testing.T) {
	key := []fence.Col{{Name: "id", Value: 1}}
	tests := []struct {
		name    string
		d       dialect.Dialect
		r       fence.Row
		set     []fence.Col
		needSet bool
		wantErr string // "": valid
	}{
		{"valid", dialect.Postgres, fence.Row{Table: "s.t", Key: key}, []fence.Col{{Name: "v", Value: 2}}, true, ""},
		{"no key", dialect.MySQL, fence.Row{Table: "t"}, nil, false, "has no key columns"},
		{"no set", dialect.MySQL, fence.Row{Table: "t", Key: key}, nil, true, "no columns to set"},
		{"key is the token column", dialect.SQLite, fence.Row{Table: "t", Key: []fence.Col{{Name: "FENCE_TOKEN"}}}, nil, false, "is also the token column"},
		{"set names a key", dialect.MySQL, fence.Row{Table: "t", Key: key}, []fence.Col{{Name: "ID"}}, false, "is also another column"},
		{"set names a key, postgres exact", dialect.Postgres, fence.Row{Table: "t", Key: key}, []fence.Col{{Name: "id"}}, false, "is also another column"},
		{"another case on postgres", dialect.Postgres, fence.Row{Table: "t", Key: key}, []fence.Col{{Name: "ID"}}, false, "is also another column"},
		{"empty column", dialect.Postgres, fence.Row{Table: "t", Key: key}, []fence.Col{{Name: ""}}, false, "empty column name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row, err := dialect.CheckRow(tt.d, tt.r, tt.set, tt.needSet)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckRow = %v", err)
				}
				if len(row.Keys) != len(tt.r.Key) || len(row.Set) != len(tt.set) || row.Token == "" {
					t.Fatalf("CheckRow = %+v", row)
				}
				return
			}
			if !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckRow = %v, want fence.ErrInvalidArgument saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckCounter(t *testing.T) {
	c := nolock.Counter{Table: "stock", Column: "left", Key: []fence.Col{{Name: "sku"}}}
	got, err := dialect.CheckCounter(dialect.MySQL, c)
	if err != nil || got.Table != "`stock`" || got.Column != "`left`" || len(got.Keys) != 1 || got.Keys[0] != "`sku`" {
		t.Fatalf("CheckCounter = %+v, %v", got, err)
	}
	for _, bad := range []nolock.Counter{
		{Table: "stock", Column: "left"},
		{Table: "stock", Column: "left", Key: []fence.Col{{Name: "LEFT"}}},
		{Table: "stock", Column: "left", Key: []fence.Col{{Name: "sku"}, {Name: "sku"}}},
	} {
		if _, err := dialect.CheckCounter(dialect.MySQL, bad); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("CheckCounter(%+v) = %v, want fence.ErrInvalidArgument", bad, err)
		}
	}
}

func TestCheckInsert(t *testing.T) {
	if _, _, err := dialect.CheckInsert(dialect.SQLite, "t", nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("CheckInsert of none = %v", err)
	}
	if _, _, err := dialect.CheckInsert(dialect.SQLite, "t", []fence.Col{{Name: "a"}, {Name: "A"}}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("CheckInsert of a twice = %v", err)
	}
	if _, _, err := dialect.CheckInsert(dialect.SQLite, "", []fence.Col{{Name: "a"}}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("CheckInsert into no table = %v", err)
	}
	qt, got, err := dialect.CheckInsert(dialect.Postgres, "s.t", []fence.Col{{Name: "a"}, {Name: `b"c`}})
	if err != nil || qt != `"s"."t"` || len(got) != 2 || got[0] != `"a"` || got[1] != `"b""c"` {
		t.Fatalf("CheckInsert on postgres = %q, %v, %v", qt, got, err)
	}
}
