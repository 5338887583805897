package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// worker is one direction of transfers.
type worker struct {
	name     string
	names    []string // the set, in the order this worker lists it
	from, to string
	cents    int64
	tokens   []fence.Token
}

// overlap counts set holders at once; more than one would be a broken lock.
type overlap struct {
	mu         sync.Mutex
	now, worst int
}

func (o *overlap) enter() {
	o.mu.Lock()
	o.now++
	o.worst = max(o.worst, o.now)
	o.mu.Unlock()
}

func (o *overlap) leave() {
	o.mu.Lock()
	o.now--
	o.mu.Unlock()
}

// scenario runs worker C's stale grant, workers A and B's transfers, and C's
// late write, and checks what it prints.
func scenario(ctx context.Context, out io.Writer, b *bank, clients []*lockclient.Client, transfers int) error {
	fmt.Fprintf(out, "start: %s %s, %s %s\n", acct42, dollars(openingCents), acct7, dollars(openingCents))
	stale, err := clients[2].Acquire(ctx, acct7)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "worker C takes %s alone: token %d; it reads %s, then freezes and its lock passes on\n",
		acct7, stale.Token(), dollars(openingCents))
	if err := stale.Release(ctx); err != nil { // what its lease running out would do, sooner
		return err
	}

	workers := []*worker{
		{name: "A", names: []string{acct42, acct7}, from: acct42, to: acct7, cents: 1000},
		{name: "B", names: []string{acct7, acct42}, from: acct7, to: acct42, cents: 700},
	}
	var ov overlap
	var wg sync.WaitGroup
	errs := make([]error, len(workers))
	for i, w := range workers {
		fmt.Fprintf(out, "worker %s moves %s from %s to %s, %d times, taking the set %q\n", w.name, dollars(w.cents), w.from, w.to, transfers, w.names)
		wg.Go(func() { errs[i] = w.run(ctx, b, clients[i], &ov, transfers) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	all := slices.Concat(workers[0].tokens, workers[1].tokens)
	slices.Sort(all)
	last := all[len(all)-1]
	fmt.Fprintf(out, "done: %d transfers, %d distinct tokens, at most %d set holder at once\n",
		len(all), len(slices.Compact(slices.Clone(all))), ov.worst)
	if len(slices.Compact(slices.Clone(all))) != len(all) || ov.worst != 1 {
		return fmt.Errorf("tokens %v, %d holders at once: the set lock failed", all, ov.worst)
	}
	return finish(ctx, out, b, stale.Token(), last)
}

// run is one worker's transfers: take the set, move the money fenced by it,
// release.
func (w *worker) run(ctx context.Context, b *bank, c *lockclient.Client, ov *overlap, n int) error {
	for range n {
		set, err := c.AcquireSet(ctx, w.names)
		if err != nil {
			return fmt.Errorf("worker %s: %w", w.name, err)
		}
		ov.enter()
		err = b.move(set.Context(), set, w.from, w.to, w.cents)
		ov.leave()
		if rerr := set.Release(ctx); err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("worker %s, token %d: %w", w.name, set.Token(), err)
		}
		if k := len(w.tokens); k > 0 && set.Token() <= w.tokens[k-1] {
			return fmt.Errorf("worker %s: token %d after %d", w.name, set.Token(), w.tokens[k-1])
		}
		w.tokens = append(w.tokens, set.Token())
	}
	return nil
}

// finish prints the balances and the stored tokens, and lets worker C write.
func finish(ctx context.Context, out io.Writer, b *bank, staleTok, last fence.Token) error {
	c42, err := b.balance(ctx, acct42)
	if err != nil {
		return err
	}
	c7, err := b.balance(ctx, acct7)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "end: %s %s, %s %s (total %s)\n", acct42, dollars(c42), acct7, dollars(c7), dollars(c42+c7))
	if c42+c7 != 2*openingCents {
		return fmt.Errorf("the total changed: %s", dollars(c42+c7))
	}
	m42, err := b.mark(ctx, acct42)
	if err != nil {
		return err
	}
	m7, err := b.mark(ctx, acct7)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "stored tokens: %s %d, %s %d (the last set's token: %d)\n", acct42, m42, acct7, m7, last)

	err = b.set(ctx, fence.NewGrant(acct7, staleTok), acct7, openingCents)
	var se *fence.StaleError
	switch {
	case errors.As(err, &se):
		fmt.Fprintf(out, "worker C wakes and writes %s = %s with token %d: refused (the database has seen token %d)\n",
			acct7, dollars(openingCents), staleTok, se.Seen)
	case err == nil:
		fmt.Fprintf(out, "worker C wakes and writes %s = %s with token %d: ACCEPTED, the stale write landed\n",
			acct7, dollars(openingCents), staleTok)
	default:
		return err
	}
	if m42 != last || m7 != last {
		return fmt.Errorf("stored tokens %d and %d, want both %d: the adapter did not raise every resource of the set (fence.Set)", m42, m7, last)
	}
	if se == nil {
		return errors.New("worker C's stale write was accepted")
	}
	return nil
}
