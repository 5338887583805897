package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/nolock"
)

const sku = "sku-42"

// flashSale lets cfg.buyers buyers, released at once, each take one of cfg.items
// items, and reports whether the outcome is the one the mode claims.
func flashSale(ctx context.Context, s *shop, cfg config, out io.Writer) (bool, error) {
	if err := s.exec(ctx, "INSERT INTO flashsale_stock (sku, items_left) VALUES (?, ?)", sku, cfg.items); err != nil {
		return false, err
	}
	how := "guarded decrement: UPDATE ... SET items_left = items_left - 1 WHERE sku = ? AND items_left >= 1"
	var lowest atomic.Int64 // the lowest stock a guarded take left behind
	lowest.Store(cfg.items)
	buy := func(ctx context.Context, buyer string) (bool, error) {
		left, ok, err := s.buyGuarded(ctx, buyer)
		for ok {
			low := lowest.Load()
			if left >= low || lowest.CompareAndSwap(low, left) {
				break
			}
		}
		return ok, err
	}
	if cfg.unguarded {
		how = "unguarded: SELECT items_left, authorise the card, UPDATE items_left = <read> - 1"
		buy = func(ctx context.Context, buyer string) (bool, error) { return s.buyUnguarded(ctx, buyer, cfg.think) }
	}
	fmt.Fprintf(out, "Flash sale: %d buyers at once, %d items of %s\n  %s\n", cfg.buyers, cfg.items, sku, how)

	var sold, soldOut atomic.Int64
	errs := make(chan error, cfg.buyers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range cfg.buyers {
		wg.Go(func() {
			<-start
			ok, err := buy(ctx, fmt.Sprintf("buyer-%04d", i+1))
			switch {
			case err != nil:
				errs <- err
			case ok:
				sold.Add(1)
			default:
				soldOut.Add(1)
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t0)
	close(errs)
	if err := <-errs; err != nil {
		return false, fmt.Errorf("a buyer failed: %w", err)
	}

	left, err := s.queryInt(ctx, "SELECT items_left FROM flashsale_stock WHERE sku = ?", sku)
	if err != nil {
		return false, err
	}
	orders, err := s.queryInt(ctx, "SELECT COUNT(*) FROM flashsale_orders")
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "  sold         %4d\n  sold out     %4d\n  items left   %4d\n  orders       %4d\n  took         %v\n",
		sold.Load(), soldOut.Load(), left, orders, took.Round(time.Millisecond))

	exact := sold.Load() == cfg.items && soldOut.Load() == int64(cfg.buyers)-cfg.items && left == 0 && orders == cfg.items && lowest.Load() == 0
	switch {
	case !cfg.unguarded && exact:
		fmt.Fprintf(out, "  OK: exactly %d sold, %d sold out; the lowest stock any take left was 0\n", cfg.items, soldOut.Load())
		return true, nil
	case !cfg.unguarded:
		fmt.Fprintf(out, "  WRONG: want %d sold, %d sold out, 0 left and %d orders (lowest stock seen: %d)\n",
			cfg.items, int64(cfg.buyers)-cfg.items, cfg.items, lowest.Load())
		return false, nil
	case sold.Load() > cfg.items:
		fmt.Fprintf(out, "  OVERSOLD: %d orders for %d items; buyers who read the same stock each took the same item\n", sold.Load(), cfg.items)
		return true, nil
	}
	fmt.Fprintf(out, "  this run happened not to oversell (try a longer -think)\n")
	return false, nil
}

// buyGuarded takes one item with the guarded decrement and, when it got one, records
// the order with a plain insert (the buyer is the key: one order per buyer). It
// returns what the take left in stock.
func (s *shop) buyGuarded(ctx context.Context, buyer string) (left int64, ok bool, err error) {
	left, err = s.guard.Decrement(ctx, nolock.Counter{
		Table: "flashsale_stock", Key: []fence.Col{{Name: "sku", Value: sku}}, Column: "items_left",
	}, 1)
	switch {
	case errors.Is(err, nolock.ErrInsufficient):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	return left, true, s.guard.Insert(ctx, "flashsale_orders", fence.Col{Name: "buyer", Value: buyer}, fence.Col{Name: "sku", Value: sku})
}

// buyUnguarded is the check-then-act a lock-free shop must not do: the stock read
// and the write are separate, so buyers who read the same value all sell.
func (s *shop) buyUnguarded(ctx context.Context, buyer string, think time.Duration) (bool, error) {
	left, err := s.queryInt(ctx, "SELECT items_left FROM flashsale_stock WHERE sku = ?", sku)
	if err != nil {
		return false, err
	}
	if left < 1 {
		return false, nil
	}
	time.Sleep(think) // authorising the card
	if err := s.exec(ctx, "UPDATE flashsale_stock SET items_left = ? WHERE sku = ?", left-1, sku); err != nil {
		return false, err
	}
	return true, s.exec(ctx, "INSERT INTO flashsale_orders (buyer, sku) VALUES (?, ?)", buyer, sku)
}

// retriedPayment sends one payment cfg.attempts times, cfg.concurrent of them at once
// and the rest one by one, as a client that timed out and retried would, and reports
// whether the outcome is the one the mode claims.
func retriedPayment(ctx context.Context, s *shop, cfg config, out io.Writer) (bool, error) {
	key := fmt.Sprintf("checkout-%d", time.Now().UnixNano())
	const amount = 5000 // cents
	var charges atomic.Int64
	charge := func(exec execFunc) ([]byte, error) {
		id := fmt.Sprintf("ch_%d", charges.Add(1))
		if err := exec(ctx, "INSERT INTO flashsale_charges (charge_id, payment_key, amount_cents) VALUES (?, ?, ?)", id, key, amount); err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "receipt: charge %s of $%d.%02d", id, amount/100, amount%100), nil
	}
	send := func() (nolock.Result, error) {
		if cfg.unguarded {
			r, err := charge(func(ctx context.Context, q string, args ...any) error { return s.exec(ctx, q, args...) })
			return nolock.Result{Value: r}, err
		}
		return s.once(ctx, key, fmt.Sprintf("amount=%d", amount), charge)
	}

	how := "idempotency key " + key + ", Store.Once"
	if cfg.unguarded {
		how = "no idempotency key"
	}
	fmt.Fprintf(out, "Retried payment: $%d.%02d sent %d times, %d of them at once\n  %s\n",
		amount/100, amount%100, cfg.attempts, cfg.concurrent, how)

	var (
		mu       sync.Mutex
		receipts = map[string]int{}
		replays  int
		firstErr error
		wg       sync.WaitGroup
	)
	record := func(r nolock.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			return
		}
		receipts[string(r.Value)]++
		if r.Replayed {
			replays++
		}
	}
	start := make(chan struct{})
	for range cfg.concurrent {
		wg.Go(func() { <-start; record(send()) })
	}
	close(start)
	wg.Wait()
	for range cfg.attempts - cfg.concurrent {
		record(send())
	}
	if firstErr != nil {
		return false, fmt.Errorf("a payment attempt failed: %w", firstErr)
	}

	reused := "not tried"
	if !cfg.unguarded {
		_, err := s.once(ctx, key, "amount=7500", charge)
		switch {
		case errors.Is(err, nolock.ErrKeyReused):
			reused = "refused (nolock.ErrKeyReused)"
		case err != nil:
			return false, err
		default:
			reused = "ACCEPTED"
		}
	}
	charged, err := s.queryInt(ctx, "SELECT COUNT(*) FROM flashsale_charges WHERE payment_key = ?", key)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "  charges      %4d\n  replays      %4d\n  receipts     %4d distinct\n  same key, $75.00: %s\n",
		charged, replays, len(receipts), reused)
	if len(receipts) == 1 {
		for r := range receipts {
			fmt.Fprintf(out, "  every attempt got %q\n", r)
		}
	}

	switch {
	case !cfg.unguarded && charged == 1 && replays == cfg.attempts-1 && len(receipts) == 1 && reused != "ACCEPTED":
		fmt.Fprintf(out, "  OK: charged once; the other %d attempts replayed the same receipt\n", replays)
		return true, nil
	case !cfg.unguarded:
		fmt.Fprintf(out, "  WRONG: want 1 charge, %d replays and one receipt\n", cfg.attempts-1)
		return false, nil
	case charged > 1:
		fmt.Fprintf(out, "  CHARGED %d TIMES for one payment\n", charged)
		return true, nil
	}
	return false, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
