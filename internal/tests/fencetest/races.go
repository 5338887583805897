package fencetest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// testBlockedStaleUpdate races a stale single-row Update against a newer fenced
// transaction that holds the resource's fence row open after its write: the Update,
// on the row the newer one wrote or on another row of the resource, must wait on the
// fence row and then be refused, never land after the newer write. A form that reads
// the mark without locking it, or re-checks only the target row, fails here.
func testBlockedStaleUpdate[Tx any](t *testing.T, h Harness[Tx]) {
	for _, target := range []string{"same-row", "other-row"} {
		t.Run(target, func(t *testing.T) {
			ctx := t.Context()
			tbl, res := table(t, h), resource(t)
			for _, id := range []string{"same-row", "other-row"} {
				if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val, note) VALUES (?, 0, 'initial')", id); err != nil {
					t.Fatal(err)
				}
			}
			// Token 40 has written: the stale Update then takes the path of a holder
			// whose token equals the stored mark.
			if err := h.Store.Update(ctx, fence.NewGrant(res, 40), row(tbl, target), fence.Col{Name: "val", Value: 1}); err != nil {
				t.Fatal(err)
			}
			inside, finish := make(chan struct{}), make(chan struct{})
			newer := make(chan error, 1)
			go func() {
				newer <- fence.Exec(ctx, h.Store, fence.NewGrant(res, 41), func(tx Tx) error {
					err := h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = 41, note = 'newer' WHERE id = ?", "same-row")
					close(inside)
					if err == nil {
						<-finish
					}
					return err
				})
			}()
			<-inside
			stale := make(chan error, 1)
			go func() {
				stale <- h.Store.Update(ctx, fence.NewGrant(res, 40), row(tbl, target), fence.Col{Name: "val", Value: 40}, fence.Col{Name: "note", Value: "stale"})
			}()
			select {
			case err := <-stale:
				close(finish)
				<-newer
				t.Fatalf("stale Update returned %v while the newer transaction held the fence row", err)
			case <-time.After(300 * time.Millisecond):
			}
			close(finish)
			if err := <-newer; err != nil {
				t.Fatalf("newer transaction: %v", err)
			}
			wantStale(t, <-stale, res, 40, 41)
			if got := intOf(t, h, "SELECT count(*) FROM "+tbl+" WHERE note = 'stale'"); got != 0 {
				t.Fatal("the stale Update landed after the newer write")
			}
			if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "same-row"); got != 41 {
				t.Fatalf("same-row val = %d, want the newer 41", got)
			}
		})
	}
}
