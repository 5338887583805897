package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// Exit statuses of fencectl exec besides the command's own.
const (
	exitHeld     = 75  // -try: another holder has the lock; nothing was run
	exitLost     = 76  // the lock was lost while the command ran; it was stopped
	exitNotFound = 127 // the command could not be started
)

// Environment variables fencectl exec gives the command.
const (
	envLock  = "FENCEGATE_LOCK"  // the lock's name
	envToken = "FENCEGATE_TOKEN" // its fencing token: fence the command's writes with it
)

// execOpts are exec's own flags.
type execOpts struct {
	ttl, grace *time.Duration
	try        *bool
}

func execFlags(fs *flag.FlagSet) execOpts {
	return execOpts{
		ttl:   fs.Duration("ttl", 10*time.Second, "session lease: how long a silent fencectl keeps the lock (whole seconds, at least 1s; a default etcd grants 2s)"),
		try:   fs.Bool("try", false, "do not wait: exit with status 75 if the lock is held"),
		grace: fs.Duration("grace", 10*time.Second, "after SIGTERM, how long the command has to exit before SIGKILL"),
	}
}

// runExec is fencectl exec (its command's about says what it does). An interrupt
// or SIGTERM to fencectl is passed to the command like a lost lock, and the lock
// is released once it has ended. The session lease is left to expire (within
// -ttl; it holds nothing), not revoked: a watcher that asks about the lease as
// it reports the release then sees it live, so released, not expired; and an
// unreachable etcd costs no wait for a revoke. lc's loop ends at the session
// deadline. Only a release that failed is followed by a revoke (Close).
func runExec(ctx context.Context, cfg *config, c *command, args []string, stdout, stderr io.Writer) int {
	fs := c.flagSet(cfg, stderr)
	opt := execFlags(fs)
	if err := fs.Parse(args); err != nil {
		return helpOr2(err)
	}
	rest := fs.Args()
	if len(rest) >= 2 && rest[1] == "--" {
		rest = append(rest[:1], rest[2:]...)
	}
	if len(rest) < 2 {
		fmt.Fprintf(stderr, "fencectl: usage: fencectl exec %s\n", c.args)
		return 2
	}
	name, argv := rest[0], rest[1:]
	if err := checkLockName(name); err != nil {
		fmt.Fprintf(stderr, "fencectl exec: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	cli, err := cfg.etcd()
	if err != nil {
		return execFailed(stderr, err)
	}
	lc, err := lockclient.New(cli, lockclient.WithPrefix(cfg.prefix), lockclient.WithTTL(*opt.ttl))
	if err != nil {
		cli.Close()
		fmt.Fprintf(stderr, "fencectl exec: -ttl: %v\n", err)
		return 2
	}
	defer cli.Close()
	l, code := takeLock(ctx, cfg, cli, lc, name, *opt.try, stderr)
	if l == nil {
		return code // a session lease granted holds nothing: left to expire
	}
	code = runHolding(ctx, lc, l, argv, *opt.grace, stdout, stderr)
	rctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	if l.Release(rctx) != nil {
		lc.Close() // revokes the session lease, and a key it could not delete with it
	}
	return code
}

// takeLock takes the lock, or returns nil and the exit status. Waiting for a
// held lock, it checks every -timeout that etcd answers, and gives up (status 1)
// when it does not answer within -timeout.
func takeLock(ctx context.Context, cfg *config, cli *clientv3.Client, lc *lockclient.Client, name string, try bool, stderr io.Writer) (*lockclient.Lock, int) {
	if !try {
		actx, cancel := context.WithCancelCause(ctx)
		probed := make(chan struct{})
		go func() { defer close(probed); probeEtcd(actx, cfg, cli, cfg.prefix+name, cancel) }()
		l, err := lc.Acquire(actx, name)
		cancel(nil)
		<-probed
		if err != nil {
			if cause := context.Cause(actx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			return nil, execFailed(stderr, cfg.etcdErr(err))
		}
		return l, 0
	}
	tctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	l, err := lc.TryAcquire(tctx, name)
	var held *lockclient.HeldError
	if errors.As(err, &held) {
		fmt.Fprintf(stderr, "fencectl exec: lock %q is held by %s (host %s, pid %d, token %d): not run\n",
			name, held.Holder.ClientID, held.Holder.Host, held.Holder.PID, held.Token)
		return nil, exitHeld
	}
	if err != nil {
		return nil, execFailed(stderr, cfg.etcdErr(err))
	}
	return l, 0
}

// probeEtcd reads key (a linearizable read: a majority answers) at once and then
// every -timeout until ctx ends; a read that fails within -timeout cancels ctx with
// its error.
func probeEtcd(ctx context.Context, cfg *config, cli *clientv3.Client, key string, cancel context.CancelCauseFunc) {
	for {
		pctx, done := context.WithTimeout(ctx, cfg.timeout)
		_, err := cli.Get(pctx, key, clientv3.WithCountOnly())
		done()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			cancel(err)
			return
		}
		t := time.NewTimer(cfg.timeout)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// runHolding runs argv while l is held and returns the exit status.
func runHolding(ctx context.Context, lc *lockclient.Client, l *lockclient.Lock, argv []string, grace time.Duration, stdout, stderr io.Writer) int {
	// A plain lock does not watch its key: a watch of the name tells when
	// someone else deleted it.
	wctx, cancelWatch := context.WithCancel(l.Context())
	defer cancelWatch()
	events, err := lc.Watch(wctx, l.Resource())
	if err != nil {
		return execFailed(stderr, err)
	}
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for ev := range events {
			if lostBy(ev, l.Token()) {
				return
			}
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), envLock+"="+l.Resource(), envToken+"="+strconv.FormatInt(int64(l.Token()), 10))
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "fencectl exec: %v\n", err)
		return exitNotFound
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return exitStatus(cmd, err)
	case <-l.Done():
		fmt.Fprintf(stderr, "fencectl exec: lock %q lost (token %d): %v; stopping the command\n", l.Resource(), l.Token(), context.Cause(l.Context()))
	case <-gone:
		if wctx.Err() != nil {
			break // the lock ended: Done is closed as well
		}
		fmt.Fprintf(stderr, "fencectl exec: lock %q lost (token %d): its key was deleted; stopping the command\n", l.Resource(), l.Token())
	case <-ctx.Done():
		terminate(cmd, exited, grace)
		return exitStatus(cmd, nil)
	}
	terminate(cmd, exited, grace)
	return exitLost
}

// lostBy reports whether ev ends the hold of token.
func lostBy(ev lockclient.Event, token fence.Token) bool {
	switch ev.Type {
	case lockclient.EventReleased, lockclient.EventExpired:
		return ev.Holder.Token == token
	case lockclient.EventTaken:
		return ev.Holder.Token != token
	case lockclient.EventFree:
		return true
	}
	return false
}

// terminate sends the command SIGTERM, and SIGKILL if it has not exited after
// grace; it returns once it exited.
func terminate(cmd *exec.Cmd, exited chan error, grace time.Duration) {
	cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		exited <- err
	case <-t.C:
		cmd.Process.Kill()
		exited <- <-exited
	}
}

// exitStatus is the command's exit status: its own, or 128+N after signal N.
func exitStatus(cmd *exec.Cmd, _ error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func execFailed(stderr io.Writer, err error) int {
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "fencectl exec: interrupted while waiting for the lock")
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "fencectl exec: %v\n", err)
	return 1
}
