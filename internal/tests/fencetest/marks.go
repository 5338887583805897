package fencetest

import (
	"context"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

// form is one fenced write form, writing val to row id of tbl under g.
type form[Tx any] struct {
	name  string
	write func(ctx context.Context, h Harness[Tx], g fence.Grant, tbl, id string, val int64) error
}

// forms are every fenced write form that stores a value: Exec (Fenced), Update,
// Upsert. Delete is checked separately: it stores no value.
func forms[Tx any]() []form[Tx] {
	return []form[Tx]{
		{"Exec", func(ctx context.Context, h Harness[Tx], g fence.Grant, tbl, id string, val int64) error {
			return fence.Exec(ctx, h.Store, g, func(tx Tx) error {
				return h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = ?, fence_token = ? WHERE id = ?", val, int64(g.Token()), id)
			})
		}},
		{"Update", func(ctx context.Context, h Harness[Tx], g fence.Grant, tbl, id string, val int64) error {
			return h.Store.Update(ctx, g, row(tbl, id), fence.Col{Name: "val", Value: val})
		}},
		{"Upsert", func(ctx context.Context, h Harness[Tx], g fence.Grant, tbl, id string, val int64) error {
			return h.Store.Upsert(ctx, g, row(tbl, id), fence.Col{Name: "val", Value: val})
		}},
	}
}

// testOneMark checks that a resource has one high-water mark whatever form each
// write takes: for every ordered pair of forms (first, then), a write by first with
// token 6 on row a makes then's write with token 5 stale, on row a and on row b of the
// same resource, with nothing written, while then's write with token 6 or 7 succeeds
// and stores its token as the mark.
func testOneMark[Tx any](t *testing.T, h Harness[Tx]) {
	for _, first := range forms[Tx]() {
		for _, then := range forms[Tx]() {
			t.Run(first.name+"Then"+then.name, func(t *testing.T) {
				ctx := t.Context()
				tbl, res := table(t, h), resource(t)
				for _, id := range []string{"a", "b"} {
					if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 0)", id); err != nil {
						t.Fatal(err)
					}
				}
				if err := first.write(ctx, h, fence.NewGrant(res, 6), tbl, "a", 60); err != nil {
					t.Fatalf("%s(6) on a: %v", first.name, err)
				}
				if got := storedToken(t, h, res); got != 6 {
					t.Fatalf("%s(6) left the mark at %d, want 6", first.name, got)
				}
				for _, id := range []string{"a", "b"} {
					err := then.write(ctx, h, fence.NewGrant(res, 5), tbl, id, 50)
					wantStale(t, err, res, 5, 6)
				}
				if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "a"); got != 60 {
					t.Fatalf("row a val = %d, want 60", got)
				}
				if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "b"); got != 0 {
					t.Fatalf("row b val = %d: a stale write landed", got)
				}
				if err := then.write(ctx, h, fence.NewGrant(res, 6), tbl, "b", 61); err != nil {
					t.Fatalf("%s(6) on b, the same token: %v", then.name, err)
				}
				if err := then.write(ctx, h, fence.NewGrant(res, 7), tbl, "b", 70); err != nil {
					t.Fatalf("%s(7) on b: %v", then.name, err)
				}
				if got := storedToken(t, h, res); got != 7 {
					t.Fatalf("%s(7) left the mark at %d, want 7", then.name, got)
				}
				wantStale(t, first.write(ctx, h, fence.NewGrant(res, 6), tbl, "a", 66), res, 6, 7)
			})
		}
	}
	t.Run("DeleteMarks", func(t *testing.T) {
		ctx := t.Context()
		tbl, res := table(t, h), resource(t)
		for _, id := range []string{"a", "b"} {
			if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 0)", id); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Store.Delete(ctx, fence.NewGrant(res, 8), row(tbl, "a")); err != nil {
			t.Fatal(err)
		}
		for _, f := range forms[Tx]() {
			wantStale(t, f.write(ctx, h, fence.NewGrant(res, 7), tbl, "b", 1), res, 7, 8)
		}
		if err := fence.Exec(ctx, h.Store, fence.NewGrant(res, 9), func(Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		wantStale(t, h.Store.Delete(ctx, fence.NewGrant(res, 8), row(tbl, "b")), res, 8, 9)
		if got := intOf(t, h, "SELECT COUNT(*) FROM "+tbl+" WHERE id = ?", "b"); got != 1 {
			t.Fatal("a stale Delete removed row b")
		}
	})
}

// setGrant is a fence.Set: several resources under one token.
type setGrant struct {
	res []string
	tok fence.Token
}

func (s setGrant) Resource() string    { return s.res[0] }
func (s setGrant) Token() fence.Token  { return s.tok }
func (s setGrant) Resources() []string { return s.res }

// testSets checks fence.Set grants: a fenced transaction raises every resource's mark
// (a later single grant on any of them with a lower token is stale, whatever its
// form); a set holding a token older than one resource's mark is refused with a
// *fence.StaleError naming that resource and writes nothing, not even the other
// marks; and the single-row forms refuse a set of several resources with
// ErrInvalidArgument and take a set of one as that resource's grant.
func testSets[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl := table(t, h)
	a, b, c := resource(t), resource(t), resource(t)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 0)", "x"); err != nil {
		t.Fatal(err)
	}
	write := func(g fence.Grant, val int64) error {
		return fence.Exec(ctx, h.Store, g, func(tx Tx) error {
			return h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = ? WHERE id = ?", val, "x")
		})
	}
	// Given in reverse order: the adapter sorts.
	if err := write(setGrant{[]string{b, a}, 10}, 10); err != nil {
		t.Fatalf("set {a,b} token 10: %v", err)
	}
	for _, r := range []string{a, b} {
		if got := storedToken(t, h, r); got != 10 {
			t.Fatalf("mark of %q = %d after the set's write, want 10", r, got)
		}
	}
	wantStale(t, write(fence.NewGrant(b, 9), 9), b, 9, 10)
	for _, f := range forms[Tx]() {
		wantStale(t, f.write(ctx, h, fence.NewGrant(b, 9), tbl, "x", 9), b, 9, 10)
	}
	// a's mark goes to 12; a set {a,c} with token 11 is refused naming a, and c keeps
	// no mark.
	if err := write(fence.NewGrant(a, 12), 12); err != nil {
		t.Fatal(err)
	}
	wantStale(t, write(setGrant{[]string{c, a}, 11}, 11), a, 11, 12)
	if got := storedToken(t, h, c); got != 0 {
		t.Fatalf("a refused set left a mark of %d on %q", got, c)
	}
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "x"); got != 12 {
		t.Fatalf("val = %d, want 12: a refused set wrote", got)
	}
	set := setGrant{[]string{a, c}, 20}
	for name, err := range map[string]error{
		"Update": h.Store.Update(ctx, set, row(tbl, "x"), fence.Col{Name: "val", Value: 1}),
		"Upsert": h.Store.Upsert(ctx, set, row(tbl, "x"), fence.Col{Name: "val", Value: 1}),
		"Delete": h.Store.Delete(ctx, set, row(tbl, "x")),
	} {
		if !errors.Is(err, fence.ErrInvalidArgument) {
			t.Fatalf("%s with a set = %v, want ErrInvalidArgument", name, err)
		}
	}
	if got := storedToken(t, h, c); got != 0 {
		t.Fatalf("a refused single-row write of a set left a mark of %d", got)
	}
	if err := h.Store.Update(ctx, setGrant{[]string{c}, 21}, row(tbl, "x"), fence.Col{Name: "val", Value: 21}); err != nil {
		t.Fatalf("Update with a set of one: %v", err)
	}
	if got := storedToken(t, h, c); got != 21 {
		t.Fatalf("mark of %q = %d after an Update with a set of one, want 21", c, got)
	}
}
