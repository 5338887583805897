// Command flashsale shows the no-lock path: when one row decides, the database
// settles the race in one statement and no lock service is needed.
//
//   - A flash sale: 1,000 buyers at once for 10 items. Each buyer takes one item with
//     a guarded decrement (UPDATE ... SET items_left = items_left - 1 WHERE sku = ?
//     AND items_left >= 1). Exactly 10 are sold, 990 buyers hear "sold out", and the
//     counter never goes below 0.
//   - A retried payment: a client that timed out sends the same payment 100 times
//     with one idempotency key, 20 of them at once. The card is charged once; every
//     attempt gets the same receipt, 99 of them as replays. The same key with another
//     amount is refused.
//
// With no flags it uses a temporary SQLite file, so it needs nothing installed:
//
//	go run ./examples/flashsale
//	go run ./examples/flashsale -unguarded     # the same, the way it goes wrong
//	go run ./examples/flashsale -postgres postgres://user:pass@host/db
//	go run ./examples/flashsale -mysql 'user:pass@tcp(host:3306)/db'
//
// -unguarded runs the same sale with a read-then-write (SELECT the stock, "charge",
// UPDATE it to the value read minus one) and the payment without an idempotency key,
// and shows what that does: items oversold, the card charged on every retry.
//
// The exit status is 0 only when the run showed what it claims: guarded, exactly the
// stock sold and one charge; with -unguarded, an oversold sale and a double charge.
// It is 1 otherwise and 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is what the flags select.
type config struct {
	db         backend
	buyers     int
	items      int64
	attempts   int
	concurrent int
	think      time.Duration
	unguarded  bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs both scenarios and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flashsale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	pg := fs.String("postgres", "", "PostgreSQL DSN: run through pgxfence (default: a SQLite file)")
	my := fs.String("mysql", "", "MySQL/MariaDB DSN: run through sqlfence")
	lite := fs.String("sqlite", "", "SQLite file to use and keep (default: a temporary file, removed at exit)")
	fs.IntVar(&cfg.buyers, "buyers", 1000, "buyers arriving at once")
	fs.Int64Var(&cfg.items, "items", 10, "items in stock")
	fs.IntVar(&cfg.attempts, "attempts", 100, "times the same payment is sent")
	fs.IntVar(&cfg.concurrent, "concurrent", 20, "of those, how many at once (the rest one by one)")
	fs.DurationVar(&cfg.think, "think", time.Millisecond, "-unguarded: time between reading the stock and writing it (authorising the card)")
	fs.BoolVar(&cfg.unguarded, "unguarded", false, "read-then-write and no idempotency key: show the oversold sale and the double charge")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: flashsale [-unguarded] [-postgres dsn | -mysql dsn | -sqlite file] [-buyers n] [-items n]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "flashsale: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := cfg.check(*pg, *my, *lite); err != nil {
		fmt.Fprintf(stderr, "flashsale: %v\n", err)
		return 2
	}

	s, err := open(ctx, cfg.db)
	if err != nil {
		fmt.Fprintf(stderr, "flashsale: %v\n", err)
		return 1
	}
	defer s.close()
	fmt.Fprintf(stdout, "flashsale: %s\n\n", s.where)

	saleOK, err := flashSale(ctx, s, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "flashsale: FAILED: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout)
	payOK, err := retriedPayment(ctx, s, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "flashsale: FAILED: %v\n", err)
		return 1
	}
	if !saleOK || !payOK {
		fmt.Fprintln(stderr, "flashsale: FAILED: the run did not show what it claims")
		return 1
	}
	return 0
}

// check validates the flags and picks the database.
func (cfg *config) check(pg, my, lite string) error {
	n := 0
	for _, s := range []string{pg, my, lite} {
		if s != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return errors.New("-postgres, -mysql and -sqlite are exclusive: pick one database")
	case pg != "":
		cfg.db = backend{kind: "postgres", dsn: pg}
	case my != "":
		cfg.db = backend{kind: "mysql", dsn: my}
	default:
		cfg.db = backend{kind: "sqlite", dsn: lite} // empty: a temporary file
	}
	switch {
	case cfg.buyers < 1 || cfg.buyers > 100_000:
		return fmt.Errorf("-buyers %d: want 1 to 100000", cfg.buyers)
	case cfg.items < 0 || cfg.items >= int64(cfg.buyers):
		return fmt.Errorf("-items %d: want 0 to buyers-1 (%d), so the sale sells out", cfg.items, cfg.buyers-1)
	case cfg.attempts < 2 || cfg.attempts > 10_000:
		return fmt.Errorf("-attempts %d: want 2 to 10000", cfg.attempts)
	case cfg.concurrent < 1 || cfg.concurrent > cfg.attempts:
		return fmt.Errorf("-concurrent %d: want 1 to -attempts (%d)", cfg.concurrent, cfg.attempts)
	case cfg.think < 0 || cfg.think > time.Second:
		return fmt.Errorf("-think %v: want 0 to 1s", cfg.think)
	}
	return nil
}
