package fencetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/fence"
)

// testLostBeforeCommit loses the grant while fn runs (its Done channel closes, as a
// *lockclient.Lock's does when its lease runs out): the transaction rolls back with a
// fence.ErrLost instead of committing, whether fn wrote or not, and the stored token
// stays where it was.
func testLostBeforeCommit[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 7)", "row"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Exec(ctx, h.Store, fence.NewGrant(res, 5), func(Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, writes := range []bool{true, false} {
		g := lost{fence.NewGrant(res, 9), make(chan struct{})}
		err := fence.Exec(ctx, h.Store, g, func(tx Tx) error {
			if writes {
				if err := h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = 8 WHERE id = ?", "row"); err != nil {
					return err
				}
			}
			close(g.done) // the lease ran out while fn worked
			return nil
		})
		if want := fmt.Sprintf("%q at token 9", res); !errors.Is(err, fence.ErrLost) || !strings.Contains(err.Error(), want) {
			t.Fatalf("writes=%v: Exec() = %v, want fence.ErrLost naming %s", writes, err, want)
		}
		if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "row"); got != 7 {
			t.Fatalf("writes=%v: row val = %d after a lost grant, want 7", writes, got)
		}
		if got := storedToken(t, h, res); got != 5 {
			t.Fatalf("writes=%v: stored token = %d after a lost grant, want 5", writes, got)
		}
	}
}
