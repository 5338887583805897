// Command transfer moves money between account-42 and account-7 under one lock on
// both accounts: lockclient.AcquireSet takes both names all-or-nothing in one etcd
// Txn, so the pair has one fencing token, and fence.Exec with that set raises the
// stored token of both accounts in the transaction that moves the money.
//
// Two workers transfer in opposite directions and list the names in opposite
// orders ({account-42, account-7} and {account-7, account-42}): with one lock per
// account taken one after the other, that is the classic deadlock. A waiting
// AcquireSet holds neither name, so it cannot happen here.
//
// Before the transfers a third worker takes account-7 alone and keeps its token,
// like a process that froze while holding it. At the end it wakes and writes to
// account-7 with that token: the database refuses it, because the sets' writes
// raised account-7's stored token too.
//
// It starts an embedded etcd and uses a temporary SQLite file, so it needs
// nothing installed:
//
//	go run ./examples/transfer
//	go run ./examples/transfer -transfers 50 -sqlite bank.db
//
// The exit status is 0 only when the run showed what it claims: every transfer
// done, the total unchanged, both accounts' stored tokens the last set's token,
// the stale write refused. It is 1 otherwise and 2 for bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs the transfers and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("transfer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	transfers := fs.Int("transfers", 20, "transfers per worker")
	lite := fs.String("sqlite", "", "SQLite file to use and keep (default: a temporary file, removed at exit)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *transfers < 1 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: transfer [-transfers n (>= 1)] [-sqlite file]")
		return 2
	}
	tmp, err := os.MkdirTemp("", "transfer-")
	if err != nil {
		fmt.Fprintln(stderr, "transfer:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	path := *lite
	if path == "" {
		path = filepath.Join(tmp, "bank.db")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := demo(ctx, stdout, tmp, path, *transfers); err != nil {
		fmt.Fprintln(stderr, "transfer:", err)
		return 1
	}
	return 0
}

// demo starts etcd, sets up the bank and runs the scenario.
func demo(ctx context.Context, out io.Writer, tmp, path string, transfers int) error {
	srv, err := locktest.Run(tmp)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer srv.Close()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer etcd.Close()
	b, err := openBank(ctx, path)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Fprintf(out, "etcd %s (embedded), SQLite file %s\n", srv.Endpoints()[0], path)

	// Each worker is a process of its own in production: one Client each.
	clients := make([]*lockclient.Client, 3)
	for i := range clients {
		if clients[i], err = lockclient.New(etcd, lockclient.WithIdentity(fmt.Sprintf("worker-%c", 'A'+i))); err != nil {
			return err
		}
		defer clients[i].Close()
	}
	return scenario(ctx, out, b, clients, transfers)
}
