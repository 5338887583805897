package main

import (
	"fmt"
	"io"
	"sort"
	"time"
)

// timeline prints the table as the run goes, one row per event, with times measured
// from the moment Server 1 asked for the lock.
type timeline struct {
	out io.Writer
	t0  time.Time
}

// row is one line of the table.
type row struct {
	at   time.Time
	text string
}

func newTimeline(out io.Writer, t0 time.Time) *timeline {
	fmt.Fprintf(out, "%-8s%s\n", "time", "event")
	return &timeline{out: out, t0: t0}
}

// since formats the time of at relative to the start, to a tenth of a second.
func (tl *timeline) since(at time.Time) string {
	return seconds(at.Sub(tl.t0))
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// add prints one row.
func (tl *timeline) add(at time.Time, format string, args ...any) {
	tl.print(row{at: at, text: fmt.Sprintf(format, args...)})
}

// addSorted prints rows in the order they happened: events reported by different
// goroutines of a worker may arrive out of order.
func (tl *timeline) addSorted(rows ...row) {
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].at.Before(rows[j].at) })
	for _, r := range rows {
		tl.print(r)
	}
}

func (tl *timeline) print(r row) {
	fmt.Fprintf(tl.out, "%-8s%s\n", tl.since(r.at), r.text)
}

// leaseTo formats when the lease an event reports ends.
func (tl *timeline) leaseTo(e event) string {
	end := e.time().Add(time.Duration(e.Lease) * time.Millisecond)
	return tl.since(end)
}

// result is what the run observed, for the verdict.
type result struct {
	noFence  bool
	resource string
	s1Token  int64   // Server 1's grant
	s2Token  int64   // Server 2's grant
	s1Wanted invoice // the stale invoice Server 1 had ready when it froze
	s2Wanted invoice // the invoice Server 2 wrote
	s1Write  event   // Server 1's write after waking
	s2Write  event   // Server 2's write
	expired  bool    // Server 2 took the lock only when etcd deleted Server 1's key
	stored   invoice // the row as read back after both workers exited
	found    bool
}

// verdict returns nil when the run showed what it claims, or an error saying what
// it showed instead.
func (r result) verdict() error {
	switch {
	case !r.expired:
		return fmt.Errorf("the key of Server 1 was not seen expiring before Server 2 took %s", r.resource)
	case r.s2Token <= r.s1Token:
		return fmt.Errorf("tokens did not go up: Server 1 had %d, Server 2 got %d", r.s1Token, r.s2Token)
	case r.s2Write.Outcome != "accepted":
		return fmt.Errorf("the write of Server 2 with the current token %d was not accepted: %s %s", r.s2Token, r.s2Write.Outcome, r.s2Write.Err)
	case !r.found:
		return fmt.Errorf("no invoice row for %s after the run", r.resource)
	}
	if r.noFence {
		switch {
		case r.s1Write.Outcome != "accepted":
			return fmt.Errorf("-no-fence: Server 1's unfenced write did not land: %s %s", r.s1Write.Outcome, r.s1Write.Err)
		case r.stored != r.s1Wanted:
			return fmt.Errorf("-no-fence: the stored invoice is not Server 1's stale one: %v", r.stored)
		}
		return nil
	}
	switch {
	case r.s1Write.Outcome != "refused":
		return fmt.Errorf("the stale write of Server 1 (token %d) was not refused by the database: %s %s", r.s1Token, r.s1Write.Outcome, r.s1Write.Err)
	case r.s1Write.Presented != r.s1Token || r.s1Write.Seen != r.s2Token:
		return fmt.Errorf("the refusal named tokens %d (presented) and %d (seen), want %d and %d",
			r.s1Write.Presented, r.s1Write.Seen, r.s1Token, r.s2Token)
	case r.stored != r.s2Wanted:
		return fmt.Errorf("the stored invoice is not Server 2's: %v", r.stored)
	}
	return nil
}

// summary prints what the run showed below the table.
func (r result) summary(out io.Writer, where string) {
	fmt.Fprintf(out, "\ninvoice row as stored (%s):\n  %v\n\n", where, r.stored)
	if r.noFence {
		fmt.Fprintf(out, "Without fencing, Server 1's stale invoice (%s, token %d) replaced Server 2's (%s, token %d):\n"+
			"the lost update fencing tokens prevent. Run without -no-fence to see it refused.\n",
			dollars(r.s1Wanted.TotalCents), r.s1Token, dollars(r.s2Wanted.TotalCents), r.s2Token)
		if r.s1Write.Lost {
			fmt.Fprintf(out, "(Server 1's lock client had noticed the loss before the write: a check just before\n"+
				"writing would have caught this one, but a pause can as well fall between the check and the write.)\n")
		}
		return
	}
	fmt.Fprintf(out, "The database refused Server 1's write: token %d presented, %d already seen (fence.ErrStale).\n",
		r.s1Write.Presented, r.s1Write.Seen)
	if r.s1Write.Lost {
		fmt.Fprintf(out, "Server 1's lock client had already noticed the loss when it wrote; the write presented\n"+
			"a bare grant so that the database, the last line of defence, is what decided.\n")
	} else {
		fmt.Fprintf(out, "Server 1's lock client had not yet noticed the loss when it wrote: only the database\n"+
			"could stop the stale write, and it did.\n")
	}
	fmt.Fprintf(out, "Server 2's invoice (%s, token %d) stands.\n", dollars(r.s2Wanted.TotalCents), r.s2Token)
}
