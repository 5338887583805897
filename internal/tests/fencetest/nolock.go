package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

// NoLockStore is what the no-lock suite needs of an adapter.
type NoLockStore[Tx any] interface {
	Guard
	Once(ctx context.Context, key, fingerprint string, fn func(Tx) ([]byte, error)) (nolock.Result, error)
}

// Guard is what every adapter's Store has for the no-lock path: a guarded
// decrement and an insert refused on a unique key.
type Guard interface {
	Decrement(ctx context.Context, c nolock.Counter, n int64) (left int64, err error)
	Insert(ctx context.Context, table string, cols ...fence.Col) error
}

// NoLockHarness connects the no-lock suite to one adapter and one real database on
// which the library's migrations (idempotency_keys) have been applied. The database
// handle should cap its open connections (a 1,000-buyer sale must queue in the pool,
// not exhaust the server's connection limit).
type NoLockHarness[Tx any] struct {
	Name     string
	Store    NoLockStore[Tx]
	Exec     func(ctx context.Context, q string, args ...any) error
	QueryInt func(ctx context.Context, q string, args ...any) (int64, error)
	TxExec   func(ctx context.Context, tx Tx, q string, args ...any) error
}

// RunNoLock runs the no-lock suite as subtests of t.
func RunNoLock[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	t.Helper()
	t.Run("FlashSale", func(t *testing.T) { testFlashSale(t, h) })
	t.Run("Wallet", func(t *testing.T) { testWallet(t, h) })
	t.Run("DecrementBadInput", func(t *testing.T) { testDecrementBad(t, h) })
	t.Run("SecondNeo", func(t *testing.T) { testDuplicate(t, h) })
	t.Run("RetriedPayment", func(t *testing.T) { testRetriedPayment(t, h) })
	t.Run("KeyReused", func(t *testing.T) { testKeyReused(t, h) })
	t.Run("FnFails", func(t *testing.T) { testFnFails(t, h) })
}

func nlTable[Tx any](t *testing.T, h NoLockHarness[Tx], cols string) string {
	t.Helper()
	return createTable(t, h.Name, h.Exec, "fgn", cols)
}

func nlInt[Tx any](t *testing.T, h NoLockHarness[Tx], q string, args ...any) int64 {
	t.Helper()
	return mustQueryInt(t, h.QueryInt, q, args...)
}

// guardedRace takes amount from a counter holding start with buyers concurrent
// callers and returns how many succeeded and how many were refused as insufficient.
func guardedRace[Tx any](t *testing.T, h NoLockHarness[Tx], start, amount int64, buyers int) (tbl string, sold, refused int64) {
	t.Helper()
	ctx := t.Context()
	tbl = nlTable(t, h, "sku VARCHAR(64) PRIMARY KEY, items_left BIGINT NOT NULL")
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (sku, items_left) VALUES (?, ?)", "sku-1", start); err != nil {
		t.Fatal(err)
	}
	c := nolock.Counter{Table: tbl, Key: []fence.Col{{Name: "sku", Value: "sku-1"}}, Column: "items_left"}
	var ok, no atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range buyers {
		wg.Go(func() {
			<-release
			left, err := h.Store.Decrement(ctx, c, amount)
			switch {
			case err == nil:
				ok.Add(1)
				if left < 0 {
					t.Errorf("left = %d after a successful take", left)
				}
			case errors.Is(err, nolock.ErrInsufficient):
				no.Add(1)
				if left >= amount || left < 0 {
					t.Errorf("refused with %d left, wanted %d", left, amount)
				}
			default:
				t.Errorf("Decrement: %v", err)
			}
		})
	}
	close(release)
	wg.Wait()
	return tbl, ok.Load(), no.Load()
}

func testFlashSale[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	tbl, sold, refused := guardedRace(t, h, 10, 1, 1000)
	if sold != 10 || refused != 990 {
		t.Fatalf("sold %d, refused %d; want 10 and 990", sold, refused)
	}
	if left := nlInt(t, h, "SELECT items_left FROM "+tbl+" WHERE sku = ?", "sku-1"); left != 0 {
		t.Fatalf("items_left = %d, want 0", left)
	}
}

func testWallet[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	tbl, paid, refused := guardedRace(t, h, 1000, 50, 100)
	if paid != 20 || refused != 80 {
		t.Fatalf("%d withdrawals of $50 succeeded, %d refused; want 20 and 80", paid, refused)
	}
	if left := nlInt(t, h, "SELECT items_left FROM "+tbl+" WHERE sku = ?", "sku-1"); left != 0 {
		t.Fatalf("balance = %d, want 0", left)
	}
}

func testDecrementBad[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	ctx := t.Context()
	tbl := nlTable(t, h, "sku VARCHAR(64) PRIMARY KEY, items_left BIGINT NOT NULL")
	if err := h.Exec(ctx, "INSERT INTO "+tbl+" (sku, items_left) VALUES (?, 3)", "a"); err != nil {
		t.Fatal(err)
	}
	key := []fence.Col{{Name: "sku", Value: "a"}}
	tests := []struct {
		name string
		c    nolock.Counter
		n    int64
		want error
		msg  string // what the error must say
	}{
		{"zero amount", nolock.Counter{Table: tbl, Key: key, Column: "items_left"}, 0, fence.ErrInvalidArgument, "the amount must be > 0"},
		{"negative amount", nolock.Counter{Table: tbl, Key: key, Column: "items_left"}, -1, fence.ErrInvalidArgument, "the amount must be > 0"},
		{"no such row", nolock.Counter{Table: tbl, Key: []fence.Col{{Name: "sku", Value: "zz"}}, Column: "items_left"}, 1, fence.ErrNotFound, ""},
		{"too much", nolock.Counter{Table: tbl, Key: key, Column: "items_left"}, 4, nolock.ErrInsufficient, ""},
		{"empty table", nolock.Counter{Key: key, Column: "items_left"}, 1, fence.ErrInvalidArgument, "invalid identifier: empty table name"},
		{"empty column", nolock.Counter{Table: tbl, Key: key}, 1, fence.ErrInvalidArgument, "invalid identifier: empty counter column name"},
		{"no key", nolock.Counter{Table: tbl, Column: "items_left"}, 1, fence.ErrInvalidArgument, "no key columns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := h.Store.Decrement(ctx, tt.c, tt.n); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Decrement() = %v, want %v saying %q", err, tt.want, tt.msg)
			}
		})
	}
	left, err := h.Store.Decrement(ctx, nolock.Counter{Table: tbl, Key: key, Column: "items_left"}, 3)
	if err != nil || left != 0 {
		t.Fatalf("Decrement(3 of 3) = %d, %v; want 0, nil", left, err)
	}
}

func testDuplicate[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	ctx := t.Context()
	tbl := nlTable(t, h, "id VARCHAR(64) PRIMARY KEY, name VARCHAR(64) NOT NULL UNIQUE")
	if err := h.Store.Insert(ctx, tbl, fence.Col{Name: "id", Value: "1"}, fence.Col{Name: "name", Value: "neo"}); err != nil {
		t.Fatalf("first neo: %v", err)
	}
	err := h.Store.Insert(ctx, tbl, fence.Col{Name: "id", Value: "2"}, fence.Col{Name: "name", Value: "neo"})
	var de *nolock.DuplicateError
	if !errors.Is(err, nolock.ErrDuplicate) || !errors.As(err, &de) {
		t.Fatalf("second neo: %v, want a *nolock.DuplicateError", err)
	}
	if de.Table != tbl || de.Err == nil {
		t.Fatalf("DuplicateError = %+v, want table %q and the driver's error", de, tbl)
	}
	if n := nlInt(t, h, "SELECT COUNT(*) FROM "+tbl); n != 1 {
		t.Fatalf("%d users, want 1", n)
	}
	if err := h.Store.Insert(ctx, "", fence.Col{Name: "id", Value: "3"}); !errors.Is(err, fence.ErrInvalidArgument) || !strings.Contains(err.Error(), "invalid identifier: empty table name") {
		t.Fatalf("Insert into an empty table name = %v", err)
	}
	if err := h.Store.Insert(ctx, tbl); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatalf("Insert of no columns = %v", err)
	}
}

// pay is the work of a payment request: it records a charge in the same
// transaction as the idempotency key and returns a receipt.
func pay[Tx any](h NoLockHarness[Tx], tbl, key string, runs *atomic.Int64) func(Tx) ([]byte, error) {
	return func(tx Tx) ([]byte, error) {
		n := runs.Add(1)
		if err := h.TxExec(context.Background(), tx, "INSERT INTO "+tbl+" (id, idem_key, amount) VALUES (?, ?, 50)", n, key); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "receipt-%s-run-%d", key, n), nil
	}
}

func testRetriedPayment[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	ctx := t.Context()
	tbl := nlTable(t, h, "id BIGINT PRIMARY KEY, idem_key VARCHAR(200) NOT NULL, amount BIGINT NOT NULL")
	key := fmt.Sprintf("pay-%d-%d", rand.Int64(), seq.Add(1))
	var runs atomic.Int64
	var (
		mu       sync.Mutex
		results  = map[string]int{}
		replays  int
		wg       sync.WaitGroup
		release  = make(chan struct{})
		callOnce = func() {
			r, err := h.Store.Once(ctx, key, "amount=50", pay(h, tbl, key, &runs))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("Once: %v", err)
				return
			}
			results[string(r.Value)]++
			if r.Replayed {
				replays++
			}
		}
	)
	for range 20 {
		wg.Go(func() { <-release; callOnce() })
	}
	close(release)
	wg.Wait()
	for range 80 {
		callOnce()
	}
	if t.Failed() {
		return
	}
	if n := nlInt(t, h, "SELECT COUNT(*) FROM "+tbl); n != 1 {
		t.Fatalf("charged %d times, want once", n)
	}
	if len(results) != 1 || replays != 99 {
		t.Fatalf("results %v, %d replays; want one result for all 100 and 99 replays", results, replays)
	}
}

func testKeyReused[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	ctx := t.Context()
	tbl := nlTable(t, h, "id BIGINT PRIMARY KEY, idem_key VARCHAR(200) NOT NULL, amount BIGINT NOT NULL")
	key := fmt.Sprintf("pay-%d-%d", rand.Int64(), seq.Add(1))
	var runs atomic.Int64
	if _, err := h.Store.Once(ctx, key, "amount=50", pay(h, tbl, key, &runs)); err != nil {
		t.Fatal(err)
	}
	_, err := h.Store.Once(ctx, key, "amount=5000", pay(h, tbl, key, &runs))
	if !errors.Is(err, nolock.ErrKeyReused) {
		t.Fatalf("Once with another request = %v, want ErrKeyReused", err)
	}
	if runs.Load() != 1 || nlInt(t, h, "SELECT COUNT(*) FROM "+tbl) != 1 {
		t.Fatalf("runs = %d: a reused key ran the work again", runs.Load())
	}
}

func testFnFails[Tx any](t *testing.T, h NoLockHarness[Tx]) {
	ctx := t.Context()
	tbl := nlTable(t, h, "id BIGINT PRIMARY KEY, idem_key VARCHAR(200) NOT NULL, amount BIGINT NOT NULL")
	key := fmt.Sprintf("pay-%d-%d", rand.Int64(), seq.Add(1))
	declined := errors.New("card declined")
	_, err := h.Store.Once(ctx, key, "amount=50", func(tx Tx) ([]byte, error) {
		if err := h.TxExec(ctx, tx, "INSERT INTO "+tbl+" (id, idem_key, amount) VALUES (?, ?, 50)", 1, key); err != nil {
			return nil, err
		}
		return nil, declined
	})
	if !errors.Is(err, declined) {
		t.Fatalf("Once = %v, want fn's error", err)
	}
	if n := nlInt(t, h, "SELECT COUNT(*) FROM "+tbl); n != 0 {
		t.Fatalf("a failed call left %d charges", n)
	}
	if n := nlInt(t, h, "SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = ?", key); n != 0 {
		t.Fatal("a failed call stored its key")
	}
	var runs atomic.Int64
	r, err := h.Store.Once(ctx, key, "amount=50", pay(h, tbl, key, &runs))
	if err != nil || r.Replayed || runs.Load() != 1 {
		t.Fatalf("retry after failure = %+v, %v (runs %d); want a fresh run", r, err, runs.Load())
	}
}
