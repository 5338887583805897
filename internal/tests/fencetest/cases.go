package fencetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// testBlockedStale holds a newer transaction open on the fence row while an older
// token tries to write; the older one must wait and then be refused, not applied. The
// newer one waits after its write ("after-write"), where every adapter holds the
// fence row; with h.FenceFirst also before any statement ("before-any-statement"),
// where only an adapter that raises the fence before fn runs holds it.
func testBlockedStale[Tx any](t *testing.T, h Harness[Tx]) {
	t.Run("after-write", func(t *testing.T) { blockedStale(t, h, false) })
	if h.FenceFirst {
		t.Run("before-any-statement", func(t *testing.T) { blockedStale(t, h, true) })
	}
}

func blockedStale[Tx any](t *testing.T, h Harness[Tx], waitFirst bool) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val, note) VALUES (?, 0, 'initial')", "row"); err != nil {
		t.Fatal(err)
	}
	// The fence row must exist before the race, so both transactions meet on it.
	if err := fence.Exec(ctx, h.Store, fence.NewGrant(res, 1), func(Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	inside, finish := make(chan struct{}), make(chan struct{})
	newer := make(chan error, 1)
	go func() {
		newer <- fence.Exec(ctx, h.Store, fence.NewGrant(res, 41), func(tx Tx) error {
			write := func() error {
				return h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = 41, note = 'newer' WHERE id = ?", "row")
			}
			var err error
			if !waitFirst {
				err = write()
			}
			close(inside)
			if err != nil {
				return err
			}
			<-finish
			if waitFirst {
				return write()
			}
			return nil
		})
	}()
	<-inside
	stale := make(chan error, 1)
	go func() {
		stale <- fence.Exec(ctx, h.Store, fence.NewGrant(res, 40), func(tx Tx) error {
			return h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = 40, note = 'stale' WHERE id = ?", "row")
		})
	}()
	// Give the stale transaction time to reach the fence row. Returning before the
	// newer one finishes would mean it did not wait on the row lock.
	select {
	case err := <-stale:
		close(finish)
		t.Fatalf("stale transaction returned %v while the newer one held the fence row", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(finish)
	if err := <-newer; err != nil {
		t.Fatalf("newer transaction: %v", err)
	}
	wantStale(t, <-stale, res, 40, 41)
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "row"); got != 41 {
		t.Fatalf("row val = %d, want the newer 41", got)
	}
	if got := storedToken(t, h, res); got != 41 {
		t.Fatalf("stored token = %d, want 41", got)
	}
}

// testRollback checks that an error from fn undoes fn's writes and the fence raise.
func testRollback[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 7)", "row"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Exec(ctx, h.Store, fence.NewGrant(res, 5), func(Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("job failed")
	err := fence.Exec(ctx, h.Store, fence.NewGrant(res, 9), func(tx Tx) error {
		if err := h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = 8 WHERE id = ?", "row"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Exec() = %v, want fn's error", err)
	}
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "row"); got != 7 {
		t.Fatalf("row val = %d after a failed job, want 7", got)
	}
	if got := storedToken(t, h, res); got != 5 {
		t.Fatalf("stored token = %d after a failed job, want 5 (the raise must roll back)", got)
	}
}

type lost struct {
	fence.Grant
	done chan struct{}
}

func (l lost) Done() <-chan struct{} { return l.done }

// testBadGrant calls the adapter directly, not through fence.Exec: it must check too.
func testBadGrant[Tx any](t *testing.T, h Harness[Tx]) {
	closed := make(chan struct{})
	close(closed)
	res := resource(t)
	tests := []struct {
		name  string
		grant fence.Grant
		want  error
		msg   string // what the error must say
	}{
		{"zero token", fence.NewGrant(res, 0), fence.ErrInvalidArgument, fmt.Sprintf("invalid token 0 for %q", res)},
		{"negative token", fence.NewGrant(res, -1), fence.ErrInvalidArgument, fmt.Sprintf("invalid token -1 for %q", res)},
		{"empty resource", fence.NewGrant("", 3), fence.ErrInvalidArgument, "invalid resource: empty resource name"},
		{"nil grant", nil, fence.ErrInvalidArgument, "nil grant"},
		{"lost lock", lost{fence.NewGrant(res, 3), closed}, fence.ErrLost, "lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran := false
			err := h.Store.Fenced(t.Context(), tt.grant, func(Tx) error { ran = true; return nil })
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) || ran {
				t.Fatalf("Fenced() = %v (fn ran: %v), want %v saying %q", err, ran, tt.want, tt.msg)
			}
			err = h.Store.Update(t.Context(), tt.grant, fence.Row{Table: "t", Key: []fence.Col{{Name: "id", Value: "a"}}}, fence.Col{Name: "val", Value: 1})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Update() = %v, want %v saying %q", err, tt.want, tt.msg)
			}
		})
	}
	if got := storedToken(t, h, res); got != 0 {
		t.Fatalf("a refused grant left fence token %d", got)
	}
}

func row(tbl, id string) fence.Row {
	return fence.Row{Table: tbl, Key: []fence.Col{{Name: "id", Value: id}}}
}

func testRowUpdate[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 1)", "a"); err != nil {
		t.Fatal(err)
	}
	g := func(tok fence.Token) fence.Grant { return fence.NewGrant(res, tok) }
	if err := h.Store.Update(ctx, g(10), row(tbl, "a"), fence.Col{Name: "val", Value: 100}, fence.Col{Name: "note", Value: "ten"}); err != nil {
		t.Fatalf("Update(10) = %v", err)
	}
	// Unchanged values with the same token are a valid write, not a refusal.
	if err := h.Store.Update(ctx, g(10), row(tbl, "a"), fence.Col{Name: "val", Value: 100}, fence.Col{Name: "note", Value: "ten"}); err != nil {
		t.Fatalf("Update(10) with unchanged values = %v", err)
	}
	wantStale(t, h.Store.Update(ctx, g(9), row(tbl, "a"), fence.Col{Name: "val", Value: 9}), res, 9, 10)
	if err := h.Store.Update(ctx, g(11), row(tbl, "missing"), fence.Col{Name: "val", Value: 1}); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Update of a missing row = %v, want ErrNotFound", err)
	}
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "a"); got != 100 {
		t.Fatalf("val = %d, want 100", got)
	}
	if got := intOf(t, h, "SELECT fence_token FROM "+tbl+" WHERE id = ?", "a"); got != 10 {
		t.Fatalf("fence_token = %d, want 10", got)
	}
}

func testRowUpsert[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	g := func(tok fence.Token) fence.Grant { return fence.NewGrant(res, tok) }
	steps := []struct {
		tok     fence.Token
		val     int64
		stale   bool
		wantVal int64
	}{
		{5, 50, false, 50}, // inserts
		{7, 70, false, 70}, // updates
		{6, 60, true, 70},  // stale: refused
		{7, 70, false, 70}, // same token, unchanged values
		{8, 80, false, 80}, // newer again
		{2, 20, true, 80},  // far older
	}
	for i, s := range steps {
		err := h.Store.Upsert(ctx, g(s.tok), row(tbl, "a"), fence.Col{Name: "val", Value: s.val})
		if s.stale {
			var se *fence.StaleError
			if !errors.As(err, &se) || se.Presented != s.tok {
				t.Fatalf("step %d: Upsert(%d) = %v, want stale", i, s.tok, err)
			}
		} else if err != nil {
			t.Fatalf("step %d: Upsert(%d) = %v", i, s.tok, err)
		}
		if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "a"); got != s.wantVal {
			t.Fatalf("step %d: val = %d, want %d", i, got, s.wantVal)
		}
	}
	if got := intOf(t, h, "SELECT COUNT(*) FROM "+tbl); got != 1 {
		t.Fatalf("%d rows, want 1", got)
	}
}

// testRowDelete checks that a delete cannot be undone by an older holder re-inserting
// the row: the fence row remembers the deleting token.
func testRowDelete[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	g := func(tok fence.Token) fence.Grant { return fence.NewGrant(res, tok) }
	count := func() int64 { return intOf(t, h, "SELECT COUNT(*) FROM "+tbl+" WHERE id = ?", "a") }
	if err := h.Store.Upsert(ctx, g(10), row(tbl, "a"), fence.Col{Name: "val", Value: 1}); err != nil {
		t.Fatal(err)
	}
	wantStale(t, h.Store.Delete(ctx, g(9), row(tbl, "a")), res, 9, 0)
	if count() != 1 {
		t.Fatal("a stale delete removed the row")
	}
	if err := h.Store.Delete(ctx, g(12), row(tbl, "a")); err != nil {
		t.Fatalf("Delete(12) = %v", err)
	}
	if count() != 0 {
		t.Fatal("row still there after Delete(12)")
	}
	wantStale(t, h.Store.Upsert(ctx, g(11), row(tbl, "a"), fence.Col{Name: "val", Value: 666}), res, 11, 12)
	if count() != 0 {
		t.Fatal("a stale holder re-inserted the deleted row")
	}
	if err := h.Store.Delete(ctx, g(13), row(tbl, "a")); !errors.Is(err, fence.ErrNotFound) {
		t.Fatalf("Delete of a missing row = %v, want ErrNotFound", err)
	}
	if err := h.Store.Upsert(ctx, g(14), row(tbl, "a"), fence.Col{Name: "val", Value: 2}); err != nil {
		t.Fatalf("a newer holder re-inserting: %v", err)
	}
	if count() != 1 {
		t.Fatal("newer re-insert missing")
	}
}

func testRowBadInput[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl := table(t, h)
	g := fence.NewGrant(resource(t), 3)
	key := []fence.Col{{Name: "id", Value: "a"}}
	tests := []struct {
		name string
		call func() error
		msg  string // what the error, wrapping fence.ErrInvalidArgument, must say
	}{
		{"empty table", func() error { return h.Store.Update(ctx, g, fence.Row{Key: key}, fence.Col{Name: "val", Value: 1}) }, "invalid identifier: empty table name"},
		{"nul in table", func() error {
			return h.Store.Update(ctx, g, fence.Row{Table: "a\x00b", Key: key}, fence.Col{Name: "val", Value: 1})
		}, "contains a NUL byte"},
		{"empty column", func() error { return h.Store.Update(ctx, g, row(tbl, "a"), fence.Col{Name: "", Value: 1}) }, "invalid identifier: empty"},
		{"empty key column", func() error {
			return h.Store.Update(ctx, g, fence.Row{Table: tbl, Key: []fence.Col{{Name: "", Value: "a"}}}, fence.Col{Name: "val", Value: 1})
		}, "invalid identifier: empty"},
		{"no key", func() error { return h.Store.Update(ctx, g, fence.Row{Table: tbl}, fence.Col{Name: "val", Value: 1}) }, "no key columns"},
		{"no columns to set", func() error { return h.Store.Update(ctx, g, row(tbl, "a")) }, "no columns to set"},
		{"upsert no key", func() error { return h.Store.Upsert(ctx, g, fence.Row{Table: tbl}, fence.Col{Name: "val", Value: 1}) }, "no key columns"},
		{"delete no key", func() error { return h.Store.Delete(ctx, g, fence.Row{Table: tbl}) }, "no key columns"},
		{"nil fn", func() error { return h.Store.Fenced(ctx, g, nil) }, "nil function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error = %v, want fence.ErrInvalidArgument saying %q", err, tt.msg)
			}
		})
	}
}

// testHostile passes names that would change the statement if they were concatenated;
// quoted, they only name tables and columns that do not exist.
func testHostile[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl := table(t, h)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 5)", "a"); err != nil {
		t.Fatal(err)
	}
	g := fence.NewGrant(resource(t), 3)
	names := []string{
		tbl + "; DROP TABLE " + tbl + "; --",
		tbl + `" ; DELETE FROM ` + tbl + ` ; --`,
		tbl + "` ; DELETE FROM " + tbl + " ; --",
		tbl + "' OR '1'='1",
		tbl + " /* comment */",
		"ταμπλό",
	}
	for _, name := range names {
		if err := h.Store.Update(ctx, g, fence.Row{Table: name, Key: []fence.Col{{Name: "id", Value: "a"}}}, fence.Col{Name: "val", Value: 0}); err == nil {
			t.Errorf("Update on table %q succeeded", name)
		}
		if err := h.Store.Update(ctx, g, row(tbl, "a"), fence.Col{Name: "val = 0, note", Value: "x"}); err == nil {
			t.Errorf("Update with a hostile column succeeded")
		}
		if err := h.Store.Delete(ctx, g, fence.Row{Table: tbl, Key: []fence.Col{{Name: "id = id OR 1=1 --", Value: "a"}}}); err == nil {
			t.Errorf("Delete with a hostile key column succeeded")
		}
	}
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "a"); got != 5 {
		t.Fatalf("val = %d, want 5: a hostile name changed data", got)
	}
}
