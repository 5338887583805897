// Command redisgcpause plays the GC-pause timeline on Redis with two worker
// processes (this binary again, with -role=worker). Worker 1 takes the lock
// report-42 in etcd and gets its report ready; it is frozen with SIGSTOP while its
// lease runs out; worker 2 takes the lock with a higher fencing token and writes
// its report to Redis; worker 1 is resumed with SIGCONT and writes its stale report
// at once. Fenced with redisfence, the stale write is refused; with -no-fence
// (plain SET) it overwrites worker 2's. See README.md.
//
// The exit status is 0 only when the run showed what it claims, 1 otherwise and 2
// for bad flags.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/adapters/redisfence"
	"github.com/fencegate/fencegate/adapters/redisfence/redistest"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

type config struct {
	redis, resource string
	etcd            []string
	lease           time.Duration
	noFence         bool
	role, name      string
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.role == "worker" {
		err = worker(ctx, cfg, os.Stdin, os.Stdout)
	} else {
		err = orchestrate(ctx, cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redisgcpause:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("redisgcpause", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var etcd string
	fs.StringVar(&cfg.redis, "redis", "", "Redis address host:port (default: a throwaway redis-server with AOF always)")
	fs.StringVar(&etcd, "etcd", "", "comma-separated endpoints of a running etcd (default: a local one)")
	fs.StringVar(&cfg.resource, "resource", "report-42", "the lock's name; the report's key is {resource}:report")
	fs.DurationVar(&cfg.lease, "lease", 2*time.Second, "the lock's lease (whole seconds, at least 2s)")
	fs.BoolVar(&cfg.noFence, "no-fence", false, "write with plain SET, to see the stale report land")
	fs.StringVar(&cfg.role, "role", "", "internal: worker runs one worker process driven over stdin")
	fs.StringVar(&cfg.name, "name", "", "internal: the worker's name")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "redisgcpause: unexpected arguments %q\n", fs.Args())
		return cfg, errors.New("arguments")
	}
	if cfg.lease < 2*time.Second || cfg.lease%time.Second != 0 {
		fmt.Fprintf(stderr, "redisgcpause: -lease %v: want whole seconds, at least 2s\n", cfg.lease)
		return cfg, errors.New("lease")
	}
	if cfg.resource == "" {
		fmt.Fprintln(stderr, "redisgcpause: empty -resource")
		return cfg, errors.New("resource")
	}
	if etcd != "" {
		cfg.etcd = strings.Split(etcd, ",")
	}
	return cfg, nil
}

// orchestrate starts the servers it was not given, runs the two workers through
// the timeline and says what landed.
func orchestrate(ctx context.Context, cfg config, out io.Writer) error {
	dir, err := os.MkdirTemp("", "redisgcpause-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cfg.etcd == nil {
		etcd, err := locktest.Run(dir)
		if err != nil {
			return fmt.Errorf("start etcd: %w", err)
		}
		defer etcd.Close()
		cfg.etcd = etcd.Endpoints()
	}
	if cfg.redis == "" {
		node, err := redistest.StartNode(ctx)
		if err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		defer node.Close()
		cfg.redis = node.Addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.redis})
	defer rdb.Close()
	key := "{" + cfg.resource + "}:report"
	if err := rdb.Del(ctx, key, redisfence.MarkKey(cfg.resource)).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", cfg.redis, err)
	}
	mode := "fenced by redisfence"
	if cfg.noFence {
		mode = "with plain SET"
	}
	fmt.Fprintf(out, "Writing %s to Redis at %s, %s; locks in etcd at %s, lease %v.\n", key, cfg.redis, mode, strings.Join(cfg.etcd, ","), cfg.lease)

	w1, err := startWorker(ctx, cfg, "1")
	if err != nil {
		return err
	}
	defer w1.stop()
	fmt.Fprintf(out, "worker 1 takes %s: token %s; its report is ready\n", cfg.resource, w1.expect("token "))
	w1.expect("ready")
	if err := w1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	fmt.Fprintf(out, "worker 1 is frozen (SIGSTOP), as a long GC pause freezes a process; its lease runs out\n")
	w2, err := startWorker(ctx, cfg, "2")
	if err != nil {
		return err
	}
	defer w2.stop()
	fmt.Fprintf(out, "worker 2 takes %s: token %s\n", cfg.resource, w2.expect("token "))
	w2.expect("ready")
	w2.send("write")
	fmt.Fprintf(out, "worker 2 writes its report: %s\n", w2.expect("result "))
	w1.send("write") // waiting in the pipe: worker 1's first act on waking
	if err := w1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	fmt.Fprintf(out, "worker 1 wakes (SIGCONT) and writes its stale report: %s\n", w1.expect("result "))
	if w1.err != nil || w2.err != nil {
		return errors.Join(w1.err, w2.err)
	}
	stored, err := rdb.Get(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	fmt.Fprintf(out, "Redis holds: %q\n", stored)
	switch {
	case !cfg.noFence && strings.Contains(stored, "worker 2"):
		fmt.Fprintln(out, "The stale write was refused where the data lands: worker 2's report stands.")
	case cfg.noFence && strings.Contains(stored, "worker 1"):
		fmt.Fprintln(out, "Without fencing, worker 1's stale report overwrote worker 2's.")
	default:
		return fmt.Errorf("the run did not show what it claims: stored %q", stored)
	}
	return nil
}

// proc is a worker process driven over its stdin, reporting on its stdout.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	err   error // the first thing that went wrong
}

func startWorker(ctx context.Context, cfg config, name string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-role=worker", "-name=" + name, "-redis=" + cfg.redis, "-etcd=" + strings.Join(cfg.etcd, ","),
		"-resource=" + cfg.resource, "-lease=" + cfg.lease.String()}
	if cfg.noFence {
		args = append(args, "-no-fence")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	p := &proc{cmd: cmd}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	p.lines = bufio.NewScanner(stdout)
	return p, nil
}

// expect returns the rest of the worker's next line starting with prefix.
func (p *proc) expect(prefix string) string {
	for p.err == nil && p.lines.Scan() {
		line := p.lines.Text()
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
		if strings.HasPrefix(line, "error ") {
			p.err = errors.New(line)
		}
	}
	if p.err == nil {
		p.err = fmt.Errorf("worker ended before %q: %v", prefix, p.lines.Err())
	}
	return "(" + p.err.Error() + ")"
}

func (p *proc) send(line string) {
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil && p.err == nil {
		p.err = err
	}
}

func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.stdin.Close()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}
