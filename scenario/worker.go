package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/fence"
	"github.com/fencegate/fencegate/lockclient"
)

// Points the kit reaches for a job: Granted after Worker.Acquire or AcquirePermit
// took a lock, AboutToWrite and Wrote before and after Worker.Write's write,
// InStore inside a Store's fenced transaction once the grant's own check has
// passed, OnTheWire when a recorded write's statement has left the process (held
// by the kit's proxy to the store until the step met there ends: a When point
// only; see the package doc), Finished when the worker's process has ended (for
// Until and When of another worker).
const (
	Granted      = "granted"
	AboutToWrite = "about to write"
	InStore      = "in store"
	OnTheWire    = "on the wire"
	Wrote        = "wrote"
	Finished     = "finished"
)

// Environment of a worker process: its name and the control address of the run.
const (
	workerEnv = "FENCEGATE_SCENARIO_WORKER"
	mainEnv   = "FENCEGATE_SCENARIO_MAIN"
)

// msg is one message between a worker and the run, a JSON object per line.
type msg struct {
	Kind       string        `json:"kind"` // hello, config, reach, begin, end, exit, go
	Worker     string        `json:"worker,omitempty"`
	Point      string        `json:"point,omitempty"`
	Resource   string        `json:"resource,omitempty"`
	Token      fence.Token   `json:"token,omitempty"`
	Value      string        `json:"value,omitempty"`
	Outcome    Outcome       `json:"outcome,omitempty"`
	Err        string        `json:"err,omitempty"`
	Fenced     bool          `json:"fenced,omitempty"`  // exit: the job stopped as a fenced job does (see jobStopped)
	Permit     string        `json:"permit,omitempty"`  // a Granted permit's semaphore name
	Permits    int           `json:"permits,omitempty"` // and its n
	Endpoints  []string      `json:"endpoints,omitempty"`
	StoreAddr  string        `json:"store_addr,omitempty"`  // Config.StoreServer's
	StoreProxy string        `json:"store_proxy,omitempty"` // the worker's proxy to it
	Prefix     string        `json:"prefix,omitempty"`
	TTL        time.Duration `json:"ttl,omitempty"`
	Data       string        `json:"data,omitempty"`
}

// Worker is a job's handle on the run, in the worker process.
type Worker struct {
	name, data string
	storeAddr  string
	storeProxy string
	client     *lockclient.Client
	mu         sync.Mutex
	enc        *json.Encoder
	dec        *json.Decoder
	lmu        sync.Mutex
	locks      []*lockclient.Lock // taken through Acquire and AcquirePermit
}

// Name is the worker's name from Config.Workers.
func (w *Worker) Name() string { return w.name }

// Data is what Config.Setup returned in the test process.
func (w *Worker) Data() string { return w.data }

// Client is the worker's lock client, on the run's etcd through the worker's own
// proxy (the one CutOff and Slow act on).
func (w *Worker) Client() *lockclient.Client { return w.client }

// StoreDSN returns dsn with the address of Config.StoreServer (as in the DSN
// its DSN method gives) replaced by the worker's own proxy to it, the
// connections CutOffStore cuts. Its error wraps fence.ErrInvalidArgument when the
// run has no StoreServer or dsn does not hold its address; or is the run's.
func (w *Worker) StoreDSN(dsn string) (string, error) {
	switch {
	case w.storeProxy == "":
		return "", fmt.Errorf("%w: scenario: StoreDSN: Config.StoreServer is nil: set it to the server Config.Setup takes the DSN from", fence.ErrInvalidArgument)
	case !strings.Contains(dsn, w.storeAddr):
		return "", fmt.Errorf("%w: scenario: StoreDSN: the DSN does not hold Config.StoreServer's address %s: give the one Config.Setup took from it", fence.ErrInvalidArgument, w.storeAddr)
	}
	if err := w.call(msg{Kind: "route"}); err != nil {
		return "", err
	}
	return strings.Replace(dsn, w.storeAddr, w.storeProxy, 1), nil
}

// Acquire takes a lock as Client().Acquire does, records the grant in the history
// and reaches Granted. Its errors are Acquire's, or the run's control connection's.
func (w *Worker) Acquire(ctx context.Context, name string, opts ...lockclient.LockOption) (*lockclient.Lock, error) {
	l, err := w.client.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return w.granted(l, msg{})
}

// AcquirePermit takes one of n permits of the semaphore name as
// Client().AcquirePermit does, records the grant under its slot (l.Resource(),
// name/NNNN) with name and n, and reaches Granted. Its errors are
// AcquirePermit's (n below 1 wraps fence.ErrInvalidArgument, before any I/O), or
// the run's control connection's.
func (w *Worker) AcquirePermit(ctx context.Context, name string, n int, opts ...lockclient.LockOption) (*lockclient.Lock, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: scenario: AcquirePermit(%q, %d): n is how many permits the semaphore has: give 1 or more", fence.ErrInvalidArgument, name, n)
	}
	l, err := w.client.AcquirePermit(ctx, name, n, opts...)
	if err != nil {
		return nil, err
	}
	return w.granted(l, msg{Permit: name, Permits: n})
}

// granted records l's grant (m says whose permit it is) and reaches Granted.
func (w *Worker) granted(l *lockclient.Lock, m msg) (*lockclient.Lock, error) {
	w.lmu.Lock()
	w.locks = append(w.locks, l)
	w.lmu.Unlock()
	m.Kind, m.Point, m.Resource, m.Token = "reach", Granted, l.Resource(), l.Token()
	if err := w.call(m); err != nil {
		return nil, err
	}
	return l, nil
}

// jobStopped reports whether the job's error is a fenced job's stop:
// fence.ErrStale, fence.ErrLost, or a cancellation once one of the worker's
// locks has ended (statements on the lock's context, cancelled by its loss).
func (w *Worker) jobStopped(err error) bool {
	if errors.Is(err, fence.ErrStale) || errors.Is(err, fence.ErrLost) {
		return true
	}
	if !errors.Is(err, context.Canceled) {
		return false
	}
	w.lmu.Lock()
	defer w.lmu.Unlock()
	return slices.ContainsFunc(w.locks, func(l *lockclient.Lock) bool { return l.Context().Err() != nil })
}

// Reach tells the run the job has reached point; it returns when every step that
// waits for it has acted (the worker may be frozen in it). Its error is the run's
// control connection's, or wraps fence.ErrInvalidArgument for OnTheWire, which
// only the kit reaches.
func (w *Worker) Reach(ctx context.Context, point string) error {
	if point == OnTheWire {
		return fmt.Errorf("%w: scenario: Reach(OnTheWire): the kit reaches it when a recorded write's statement leaves the process; a job cannot", fence.ErrInvalidArgument)
	}
	return w.call(msg{Kind: "reach", Point: point})
}

// Write records one write of value to g's resource, made by fn: it reaches
// AboutToWrite, runs fn, records its outcome from fn's error (nil acknowledged,
// fence.ErrStale, fence.ErrLost, anything else commit unknown) and reaches Wrote.
// It returns fn's error. fn must be the whole write, its commit included (wrap
// fence.Exec, not a statement inside it). Give each write a distinct value (say the worker's name
// and the token) so the final state tells whose write it is.
func (w *Worker) Write(ctx context.Context, g fence.Grant, value string, fn func(context.Context) error) error {
	if fn == nil || g == nil {
		return fmt.Errorf("%w: scenario: Write needs a grant and a function", fence.ErrInvalidArgument)
	}
	if err := w.call(msg{Kind: "reach", Point: AboutToWrite}); err != nil {
		return err
	}
	if err := w.call(msg{Kind: "begin", Resource: g.Resource(), Token: g.Token(), Value: value}); err != nil {
		return err
	}
	werr := fn(ctx)
	end := msg{Kind: "end", Outcome: outcome(werr)}
	if werr != nil {
		end.Err = werr.Error()
	}
	if err := w.call(end); err != nil {
		return err
	}
	if err := w.call(msg{Kind: "reach", Point: Wrote}); err != nil {
		return err
	}
	return werr
}

func outcome(err error) Outcome {
	switch {
	case err == nil:
		return Acknowledged
	case errors.Is(err, fence.ErrStale):
		return RefusedStale
	case errors.Is(err, fence.ErrLost):
		return RefusedLost
	}
	return CommitUnknown
}

// call sends m and waits for the run's answer.
func (w *Worker) call(m msg) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(m); err != nil {
		return fmt.Errorf("scenario: worker %s: run gone: %w", w.name, err)
	}
	var r msg
	if err := w.dec.Decode(&r); err != nil {
		return fmt.Errorf("scenario: worker %s: run gone: %w", w.name, err)
	}
	return nil
}

// runWorker is Run in a worker process: it runs the job and ends the process.
func runWorker(t *testing.T, cfg Config, spec string) {
	name, addr, _ := strings.Cut(spec, " ")
	code := 0
	if err := work(t, cfg, name, addr); err != nil {
		fmt.Fprintf(os.Stderr, "scenario: worker %s: %v\n", name, err)
		code = 3
	}
	os.Exit(code)
}

func work(t *testing.T, cfg Config, name, addr string) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	w := &Worker{name: name, enc: json.NewEncoder(conn), dec: json.NewDecoder(conn)}
	if err := w.enc.Encode(msg{Kind: "hello", Worker: name}); err != nil {
		return err
	}
	var c msg
	if err := w.dec.Decode(&c); err != nil {
		return err
	}
	w.data, w.storeAddr, w.storeProxy = c.Data, c.StoreAddr, c.StoreProxy
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	w.client, err = lockclient.New(cli, lockclient.WithTTL(c.TTL), lockclient.WithPrefix(c.Prefix), lockclient.WithIdentity(name))
	if err != nil {
		return err
	}
	defer w.client.Close()
	jerr := cfg.Job(t.Context(), w)
	exit := msg{Kind: "exit"}
	if jerr != nil {
		exit.Err = jerr.Error()
		exit.Fenced = w.jobStopped(jerr)
	}
	return w.call(exit)
}
