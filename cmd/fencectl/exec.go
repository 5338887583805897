package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

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

const execUsage = "[-ttl D] [-try] [-grace D] NAME -- COMMAND [ARGS...]"

// runExec is fencectl exec: it takes the lock NAME (waiting while another holds
// it, or with -try giving up at once with status 75), runs COMMAND with the
// lock's name and token in its environment, releases the lock when the
// command ends and exits with the command's status (128+N when a signal N
// ended it). If the lock is lost while the command runs (its session lease ran
// out, or its key was deleted, as by fencectl release), the command gets
// SIGTERM, SIGKILL after -grace, and fencectl exits with status 76. An
// interrupt or SIGTERM to fencectl is passed to the command the same way, and
// the lock is released once it has ended.
func runExec(ctx context.Context, cfg *config, args []string, stdout, stderr io.Writer) int {
	fs := cfg.flags("fencectl exec", stderr)
	ttl := fs.Duration("ttl", lockclient.DefaultTTL, "session lease: how long a silent fencectl keeps the lock (whole seconds, at least 2s)")
	try := fs.Bool("try", false, "do not wait: exit with status 75 if the lock is held")
	grace := fs.Duration("grace", 10*time.Second, "after SIGTERM, how long the command has to exit before SIGKILL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rest := fs.Args()
	if len(rest) >= 2 && rest[1] == "--" {
		rest = append(rest[:1], rest[2:]...)
	}
	if len(rest) < 2 {
		fmt.Fprintf(stderr, "fencectl: usage: fencectl [flags] exec %s\n", execUsage)
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
	defer cli.Close()
	lc, err := lockclient.New(cli, lockclient.WithPrefix(cfg.prefix), lockclient.WithTTL(*ttl))
	if err != nil {
		fmt.Fprintf(stderr, "fencectl exec: -ttl: %v\n", err)
		return 2
	}
	defer lc.Close()
	l, code := takeLock(ctx, cfg, lc, name, *try, stderr)
	if l == nil {
		return code
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		defer cancel()
		l.Release(rctx)
	}()
	return runHolding(ctx, lc, l, argv, *grace, stdout, stderr)
}

// takeLock takes the lock, or returns nil and the exit status.
func takeLock(ctx context.Context, cfg *config, lc *lockclient.Client, name string, try bool, stderr io.Writer) (*lockclient.Lock, int) {
	if !try {
		l, err := lc.Acquire(ctx, name)
		if err != nil {
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
		return 1
	}
	fmt.Fprintf(stderr, "fencectl exec: %v\n", err)
	return 1
}
