// Package fencetest is the adapter-independent test suite every fencegate adapter
// passes against a real database: the GC-pause timeline, a 50-writer race, a stale
// transaction blocked behind a newer one, rollback on error, and the token-column
// writes. Each adapter's tests supply a Harness and call Run.
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fence"
)

// Store is what the suite needs of an adapter.
type Store[Tx any] interface {
	fence.Store[Tx]
	RowWriter
}

// RowWriter is what every adapter's Store has: fenced single-row writes on a table
// with a token column, sharing one high-water mark per resource with the Store's
// fenced transactions.
type RowWriter interface {
	Update(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) error
	Upsert(ctx context.Context, g fence.Grant, r fence.Row, set ...fence.Col) error
	Delete(ctx context.Context, g fence.Grant, r fence.Row) error
}

// Harness connects the suite to one adapter and one real database on which the
// library's migrations have been applied. Queries use ? placeholders; a harness for
// a database with other placeholders rewrites them.
type Harness[Tx any] struct {
	Name  string
	Store Store[Tx]
	// Exec runs a statement outside any transaction.
	Exec func(ctx context.Context, q string, args ...any) error
	// QueryInt returns the single integer a query selects; fence.ErrNotFound (wrapped
	// or not) when it selects no row.
	QueryInt func(ctx context.Context, q string, args ...any) (int64, error)
	// TxExec and TxQueryInt do the same inside a fenced transaction.
	TxExec     func(ctx context.Context, tx Tx, q string, args ...any) error
	TxQueryInt func(ctx context.Context, tx Tx, q string, args ...any) (int64, error)
	// FenceFirst says the Store raises the fence before fn runs, so that a fenced
	// transaction holds the fence row even before its first statement.
	FenceFirst bool
}

// Run runs the whole suite as subtests of t.
func Run[Tx any](t *testing.T, h Harness[Tx]) {
	t.Helper()
	t.Run("GCPauseTimeline", func(t *testing.T) { testGCPause(t, h) })
	t.Run("Race50", func(t *testing.T) { testRace(t, h) })
	t.Run("BlockedStaleTx", func(t *testing.T) { testBlockedStale(t, h) })
	t.Run("BlockedStaleUpdate", func(t *testing.T) { testBlockedStaleUpdate(t, h) })
	t.Run("RollbackOnError", func(t *testing.T) { testRollback(t, h) })
	t.Run("BadGrant", func(t *testing.T) { testBadGrant(t, h) })
	t.Run("LostBeforeCommit", func(t *testing.T) { testLostBeforeCommit(t, h) })
	t.Run("RowUpdate", func(t *testing.T) { testRowUpdate(t, h) })
	t.Run("RowUpsert", func(t *testing.T) { testRowUpsert(t, h) })
	t.Run("RowDeleteStaleReinsert", func(t *testing.T) { testRowDelete(t, h) })
	t.Run("RowBadInput", func(t *testing.T) { testRowBadInput(t, h) })
	t.Run("HostileIdentifiers", func(t *testing.T) { testHostile(t, h) })
	t.Run("OneMarkPerResource", func(t *testing.T) { testOneMark(t, h) })
	t.Run("GrantSets", func(t *testing.T) { testSets(t, h) })
}

var seq atomic.Int64

// table creates a fresh table with a token column and drops it when the test ends.
func table[Tx any](t *testing.T, h Harness[Tx]) string {
	t.Helper()
	return createTable(t, h.Name, h.Exec, "fgt", "id VARCHAR(64) PRIMARY KEY, val BIGINT NOT NULL DEFAULT 0, "+
		"note VARCHAR(200) NOT NULL DEFAULT '', fence_token BIGINT NOT NULL DEFAULT 0")
}

// createTable creates a table of cols under a fresh name starting with prefix, and
// drops it when the test ends. Both suites make their tables through it.
func createTable(t *testing.T, who string, exec func(context.Context, string, ...any) error, prefix, cols string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, rand.IntN(1_000_000), seq.Add(1))
	if err := exec(t.Context(), "CREATE TABLE "+name+" ("+cols+")"); err != nil {
		t.Fatalf("%s: create %s: %v", who, name, err)
	}
	t.Cleanup(func() { _ = exec(context.Background(), "DROP TABLE "+name) })
	return name
}

func resource(t *testing.T) string {
	return fmt.Sprintf("res-%d-%d", time.Now().UnixNano(), seq.Add(1))
}

func storedToken[Tx any](t *testing.T, h Harness[Tx], res string) fence.Token {
	t.Helper()
	v, err := h.QueryInt(t.Context(), "SELECT token FROM fence_tokens WHERE resource = ?", res)
	if errors.Is(err, fence.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("read fence row %q: %v", res, err)
	}
	return fence.Token(v)
}

func intOf[Tx any](t *testing.T, h Harness[Tx], q string, args ...any) int64 {
	t.Helper()
	return mustQueryInt(t, h.QueryInt, q, args...)
}

// mustQueryInt returns the integer q selects, failing the test on any error.
func mustQueryInt(t *testing.T, query func(context.Context, string, ...any) (int64, error), q string, args ...any) int64 {
	t.Helper()
	v, err := query(t.Context(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func wantStale(t *testing.T, err error, res string, presented, seen fence.Token) {
	t.Helper()
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) {
		t.Fatalf("error = %v, want a *fence.StaleError", err)
	}
	if se.Resource != res || se.Presented != presented || (seen != 0 && se.Seen != seen) {
		t.Fatalf("StaleError = %+v, want resource %q presented %d seen %d", se, res, presented, seen)
	}
}

// testGCPause replays the timeline at the database: 33 writes, 34 writes, 33 wakes
// up and its write is refused; the row holds 34's invoice.
func testGCPause[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	write := func(tok fence.Token, total int64) error {
		return fence.Exec(ctx, h.Store, fence.NewGrant(res, tok), func(tx Tx) error {
			if err := h.TxExec(ctx, tx, "DELETE FROM "+tbl+" WHERE id = ?", "account-42"); err != nil {
				return err
			}
			return h.TxExec(ctx, tx, "INSERT INTO "+tbl+" (id, val, note) VALUES (?, ?, ?)",
				"account-42", total, fmt.Sprintf("invoice by token %d", tok))
		})
	}
	if err := write(33, 100); err != nil {
		t.Fatalf("token 33 first write: %v", err)
	}
	if err := write(34, 200); err != nil {
		t.Fatalf("token 34 write: %v", err)
	}
	wantStale(t, write(33, 999), res, 33, 34)
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "account-42"); got != 200 {
		t.Fatalf("invoice total = %d after the stale write, want 34's 200", got)
	}
	if got := storedToken(t, h, res); got != 34 {
		t.Fatalf("stored token = %d, want 34", got)
	}
	// The same holder may write again with its own token.
	if err := write(34, 210); err != nil {
		t.Fatalf("token 34 second write: %v", err)
	}
}

// testRace has 50 writers with shuffled tokens update one resource with two
// statements each. Committed tokens must rise in commit order, every success must be
// counted and every refusal must leave no trace.
func testRace[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := t.Context()
	tbl, res := table(t, h), resource(t)
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (id, val) VALUES (?, 0)", "counter"); err != nil {
		t.Fatal(err)
	}
	const n = 50
	tokens := rand.Perm(n)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ok      = map[fence.Token]bool{}
		stale   = map[fence.Token]bool{}
		release = make(chan struct{})
	)
	for _, p := range tokens {
		tok := fence.Token(p + 1)
		wg.Go(func() {
			<-release
			err := fence.Exec(ctx, h.Store, fence.NewGrant(res, tok), func(tx Tx) error {
				if err := h.TxExec(ctx, tx, "UPDATE "+tbl+" SET val = val + 1 WHERE id = ?", "counter"); err != nil {
					return err
				}
				v, err := h.TxQueryInt(ctx, tx, "SELECT val FROM "+tbl+" WHERE id = ?", "counter")
				if err != nil {
					return err
				}
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				// The log row records the commit position (v) next to the token.
				return h.TxExec(ctx, tx, "INSERT INTO "+tbl+" (id, val, fence_token) VALUES (?, ?, ?)",
					fmt.Sprintf("log-%d", tok), v, int64(tok))
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok[tok] = true
			case errors.Is(err, fence.ErrStale):
				stale[tok] = true
			default:
				t.Errorf("token %d: unexpected error %v", tok, err)
			}
		})
	}
	close(release)
	wg.Wait()
	if t.Failed() {
		return
	}
	checkRace(t, h, tbl, res, ok, stale)
}

// checkRace checks what testRace's writers left: the highest acknowledged token
// stored, one increment per acknowledged writer, tokens rising in commit order, and
// nothing of a refused writer.
func checkRace[Tx any](t *testing.T, h Harness[Tx], tbl, res string, ok, stale map[fence.Token]bool) {
	t.Helper()
	ctx := t.Context()
	if len(ok) == 0 {
		t.Fatal("no writer succeeded")
	}
	var highest fence.Token
	for tok := range ok {
		highest = max(highest, tok)
	}
	if got := storedToken(t, h, res); got != highest {
		t.Fatalf("stored token = %d, want the highest committed %d", got, highest)
	}
	if got := intOf(t, h, "SELECT val FROM "+tbl+" WHERE id = ?", "counter"); got != int64(len(ok)) {
		t.Fatalf("counter = %d, want %d successful writes (%d refused)", got, len(ok), len(stale))
	}
	var last fence.Token
	for pos := int64(1); pos <= int64(len(ok)); pos++ {
		tok, err := h.QueryInt(ctx, "SELECT fence_token FROM "+tbl+" WHERE id LIKE 'log-%' AND val = ?", pos)
		if err != nil {
			t.Fatalf("log row at commit position %d: %v", pos, err)
		}
		if !ok[fence.Token(tok)] {
			t.Fatalf("log row at position %d has token %d, which was not acknowledged", pos, tok)
		}
		if fence.Token(tok) <= last {
			t.Fatalf("commit %d has token %d after token %d: tokens went down", pos, tok, last)
		}
		last = fence.Token(tok)
	}
	for tok := range stale {
		if n := intOf(t, h, "SELECT COUNT(*) FROM "+tbl+" WHERE id = ?", fmt.Sprintf("log-%d", tok)); n != 0 {
			t.Fatalf("refused token %d left a log row", tok)
		}
	}
	t.Logf("%s: %d committed, %d refused as stale", h.Name, len(ok), len(stale))
}
