//go:build e2e

package e2e

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
)

// Lease is the lock lease every scenario runs with: short, so a pause or a crash
// passes the lock on within seconds.
const Lease = 3 * time.Second

// labelPID marks every container and network with the test process that made it,
// so a later run can remove what a killed run left behind.
const labelPID = "fencegate-e2e.pid"

var (
	suiteOnce   sync.Once
	suitePool   *dockertest.Pool
	suiteImages Images
	suiteErr    error
)

// suite connects to the Docker engine and builds the images once per test binary.
// Without an engine the test is skipped, or fails when CI is set: CI never skips.
func suite(t *testing.T) (*dockertest.Pool, Images) {
	t.Helper()
	suiteOnce.Do(func() {
		pool, err := dockertest.NewPool("")
		if err == nil {
			err = pool.Client.Ping()
		}
		if err != nil {
			suiteErr = fmt.Errorf("the Docker engine is unreachable: %w", err)
			return
		}
		pool.MaxWait = 2 * time.Minute
		sweepLeftovers(pool)
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Dir(filepath.Dir(file))
		start := time.Now()
		suiteImages, suiteErr = BuildImages(pool, root, os.Stdout)
		fmt.Printf("e2e: images ready in %.1fs\n", time.Since(start).Seconds())
		suitePool = pool
	})
	if suiteErr != nil {
		if os.Getenv("CI") != "" || suitePool != nil {
			t.Fatal(suiteErr)
		}
		t.Skipf("%v (set CI to make this a failure)", suiteErr)
	}
	return suitePool, suiteImages
}

// sweepLeftovers removes containers and networks of earlier test processes that
// no longer exist (a run killed by its timeout cannot run its cleanups).
func sweepLeftovers(pool *dockertest.Pool) {
	dead := func(labels map[string]string) bool {
		pid, err := strconv.Atoi(labels[labelPID])
		if err != nil || pid == os.Getpid() {
			return false
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		return errors.Is(err, os.ErrNotExist)
	}
	cs, _ := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"label": {labelPID}}})
	for _, c := range cs {
		if dead(c.Labels) {
			fmt.Printf("e2e: removing leftover container %s\n", strings.Join(c.Names, ","))
			_ = pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
		}
	}
	ns, _ := pool.Client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {labelPID: true}})
	for _, n := range ns {
		if dead(n.Labels) {
			_ = pool.Client.RemoveNetwork(n.ID)
		}
	}
}

// Env is one scenario's topology: a 3-member etcd cluster on a private etcd network,
// PostgreSQL on a private database network, and billing workers attached to both.
// Everything it starts is removed by t.Cleanup, even when the test fails.
type Env struct {
	t        *testing.T
	pool     *dockertest.Pool
	images   Images
	id       string
	start    time.Time
	labels   map[string]string
	etcdNet  *dockertest.Network
	dbNet    *dockertest.Network
	Members  []*Member
	Database Database
	dbRes    *dockertest.Resource
	dbPort   string  // the database's container port
	dbFrozen string  // how the database was frozen; empty when running
	dbCut    bool    // the database is cut off its network
	DB       *sql.DB // the host's connection to the database, for assertions

	mu      sync.Mutex
	workers []*Worker
	notes   []Event // the test's own actions, for the timeline
	kills   map[string]int
}

// NewEnv starts the topology with PostgreSQL and waits until etcd has a leader and
// the database accepts connections.
func NewEnv(t *testing.T) *Env {
	t.Helper()
	return NewEnvWith(t, Postgres)
}

// NewEnvWith is NewEnv with the given database.
func NewEnvWith(t *testing.T, db Database) *Env {
	t.Helper()
	pool, images := suite(t)
	var b [3]byte
	_, _ = rand.Read(b[:])
	e := &Env{
		t: t, pool: pool, images: images,
		id:       "fg" + hex.EncodeToString(b[:]),
		start:    time.Now(),
		labels:   map[string]string{labelPID: strconv.Itoa(os.Getpid())},
		kills:    map[string]int{},
		Database: db,
	}
	t.Logf("topology %s: 3 etcd members, %s, lease %v", e.id, db, Lease)
	e.etcdNet = e.network("etcd")
	e.dbNet = e.network("db")
	for i := 1; i <= 3; i++ {
		e.Members = append(e.Members, e.startMember(i))
	}
	e.startDatabase()
	e.waitEtcd()
	return e
}

func (e *Env) name(s string) string { return e.id + "-" + s }

func (e *Env) network(s string) *dockertest.Network {
	n, err := e.pool.CreateNetwork(e.name(s), func(o *dc.CreateNetworkOptions) {
		o.Labels = e.labels
	})
	if err != nil {
		e.t.Fatalf("create network %s: %v", e.name(s), err)
	}
	e.t.Cleanup(func() {
		// The containers are removed first (cleanups run last-in first-out); the
		// engine may take a moment to let go of their endpoints.
		var err error
		for range 10 {
			if err = e.pool.Client.RemoveNetwork(n.Network.ID); err == nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
		e.t.Errorf("remove network %s: %v", e.name(s), err)
	})
	return n
}

// run starts a container and registers its removal. Port bindings are on 127.0.0.1
// only.
func (e *Env) run(opts *dockertest.RunOptions, ports ...string) *dockertest.Resource {
	e.t.Helper()
	opts.Labels = e.labels
	opts.ExposedPorts = ports
	bind := map[dc.Port][]dc.PortBinding{}
	for _, p := range ports {
		bind[dc.Port(p)] = []dc.PortBinding{{HostIP: "127.0.0.1"}}
	}
	repo, tag, _ := strings.Cut(opts.Repository, ":")
	opts.Repository, opts.Tag = repo, tag
	r, err := e.pool.RunWithOptions(opts, func(hc *dc.HostConfig) {
		hc.PublishAllPorts = false
		hc.PortBindings = bind
		hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
	})
	if err != nil {
		e.t.Fatalf("run %s: %v", opts.Name, err)
	}
	e.t.Cleanup(func() {
		if e.t.Failed() {
			e.dumpLog(r)
		}
		if err := e.pool.Purge(r); err != nil {
			e.t.Errorf("remove container %s: %v", opts.Name, err)
		}
	})
	return r
}

// hostPort returns the 127.0.0.1 port a container port is published on now (a
// restarted container gets a new one).
func (e *Env) hostPort(r *dockertest.Resource, port string) (string, error) {
	c, err := e.pool.Client.InspectContainer(r.Container.ID)
	if err != nil {
		return "", err
	}
	for _, b := range c.NetworkSettings.Ports[dc.Port(port)] {
		if b.HostPort != "" {
			return b.HostPort, nil
		}
	}
	return "", fmt.Errorf("%s: port %s is not published (state %s)", c.Name, port, c.State.String())
}

// Note records one of the test's own actions in the timeline and the log.
func (e *Env) Note(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	e.notes = append(e.notes, Event{Time: time.Now(), Worker: "test", Kind: "note", Note: msg})
	e.t.Logf("%6.2fs  %s", time.Since(e.start).Seconds(), msg)
}

// restart starts a stopped container again, once the engine reports the process
// that was killed as gone.
func (e *Env) restart(r *dockertest.Resource, what string) {
	e.t.Helper()
	e.Eventually(what+" to be down", func() bool {
		c, err := e.pool.Client.InspectContainer(r.Container.ID)
		return err == nil && !c.State.Running
	})
	if err := e.pool.Client.StartContainer(r.Container.ID, nil); err != nil {
		e.t.Fatalf("restart %s: %v", what, err)
	}
}

// lastNote returns the time of the test's latest action.
func (e *Env) lastNote() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.notes[len(e.notes)-1].Time
}

// Eventually polls cond until it holds. The bound only keeps a broken run from
// hanging; it is generous and never a timing assertion.
func (e *Env) Eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Sleep waits d, or fails the test when it has already ended.
func (e *Env) Sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.t.Context().Done():
		e.t.FailNow()
	}
}

// Timeline prints the test's actions and the workers' events in time order, with
// times relative to the start of the topology.
func (e *Env) Timeline() string {
	var all []Event
	e.mu.Lock()
	all = append(all, e.notes...)
	ws := append([]*Worker(nil), e.workers...)
	e.mu.Unlock()
	for _, w := range ws {
		all = append(all, w.Events()...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	var b strings.Builder
	b.WriteString("time     who   event\n")
	for _, ev := range all {
		if ev.Kind == "start" || ev.Kind == "stop" {
			continue
		}
		fmt.Fprintf(&b, "%6.2fs  %-5s %s\n", ev.Time.Sub(e.start).Seconds(), ev.Worker, ev.Describe())
	}
	return b.String()
}

// dumpLog prints the tail of a container's log, for a failed test.
func (e *Env) dumpLog(r *dockertest.Resource) {
	var out strings.Builder
	if err := e.pool.Client.Logs(dc.LogsOptions{Container: r.Container.ID, OutputStream: &out, ErrorStream: &out, Stdout: true, Stderr: true, Tail: "40"}); err != nil {
		fmt.Fprintf(&out, "(logs: %v)", err)
	}
	if c, err := e.pool.Client.InspectContainer(r.Container.ID); err == nil {
		fmt.Fprintf(&out, "(state: %s)", c.State.String())
	}
	e.t.Logf("--- %s (last 40 lines)\n%s", strings.TrimPrefix(r.Container.Name, "/"), out.String())
}
