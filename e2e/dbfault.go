//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dc "github.com/ory/dockertest/v3/docker"
)

// KillDatabase SIGKILLs the database server: a crash. Its data directory stays in
// the container, so RestartDatabase starts the server again from it. A frozen
// server is killed where it stands, every process of it (see killFrozen): it runs
// no more of its own code.
func (e *Env) KillDatabase() {
	e.t.Helper()
	if e.dbFrozen == "freezer" {
		err := e.killFrozen()
		if err == nil {
			e.dbFrozen = ""
			e.Note("SIGKILL every process of the frozen database server (%s), then thaw", e.Database)
			return
		}
		e.Note("cannot signal the frozen server's processes from here (%v): docker kill", err)
	}
	if err := e.pool.Client.KillContainer(dc.KillContainerOptions{ID: e.dbRes.Container.ID, Signal: dc.SIGKILL}); err != nil {
		e.t.Fatalf("kill the database: %v", err)
	}
	was := ""
	if e.dbFrozen != "" {
		was = " while frozen"
		e.dbFrozen = ""
	}
	e.Note("SIGKILL the database server (%s)%s", e.Database, was)
}

// killFrozen sends SIGKILL to every process of the frozen database container from
// the host, then thaws it: each process dies before it runs again. docker kill
// signals only the container's first process and then thaws the rest, so a
// PostgreSQL backend could still read a COMMIT waiting in its socket and answer it
// before the kernel ends it. It needs the right to signal the container's
// processes (root, one host).
func (e *Env) killFrozen() error {
	top, err := e.pool.Client.TopContainer(e.dbRes.Container.ID, "")
	if err != nil {
		return err
	}
	col := slices.Index(top.Titles, "PID")
	if col < 0 {
		return fmt.Errorf("docker top: no PID column in %q", top.Titles)
	}
	var pids []int
	for _, p := range top.Processes {
		pid, err := strconv.Atoi(strings.TrimSpace(p[col]))
		if err != nil {
			return fmt.Errorf("docker top: pid %q: %w", p[col], err)
		}
		pids = append(pids, pid)
	}
	if len(pids) == 0 {
		return errors.New("docker top lists no process")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill %d: %w", pid, err)
		}
	}
	return e.pool.Client.UnpauseContainer(e.dbRes.Container.ID)
}

// RestartDatabase starts the killed database's container again: the server
// recovers from its data directory (write-ahead log, InnoDB redo log). It waits
// until the server answers the host again.
func (e *Env) RestartDatabase() {
	e.t.Helper()
	start := time.Now()
	e.restart(e.dbRes, "the database")
	e.connectDB()
	e.Note("database restarted from its data, answering after %.1fs", time.Since(start).Seconds())
}

// CutDatabase disconnects the database from the database network: no worker
// reaches it, and what is in flight goes unanswered. Workers still reach etcd.
func (e *Env) CutDatabase() {
	e.t.Helper()
	if err := e.pool.Client.DisconnectNetwork(e.dbNet.Network.ID, dc.NetworkConnectionOptions{Container: e.dbRes.Container.ID, Force: true}); err != nil {
		e.t.Fatalf("disconnect the database: %v", err)
	}
	e.dbCut = true
	e.Note("database cut off from every worker (etcd still reachable)")
}

// RestoreDatabase attaches the database to its network again (its name and
// address stay the same) and reconnects the host.
func (e *Env) RestoreDatabase() {
	e.t.Helper()
	if err := e.pool.Client.ConnectNetwork(e.dbNet.Network.ID, dc.NetworkConnectionOptions{Container: e.dbRes.Container.ID}); err != nil {
		e.t.Fatalf("reconnect the database: %v", err)
	}
	e.dbCut = false
	e.Note("database network restored")
	if e.dbFrozen == "" {
		e.connectDB() // its published port changed
	}
}

// FreezeDatabase stops every process of the database server, as a stalled VM
// does: the cgroup freezer (docker pause), or SIGSTOP where the engine refuses it.
// The kernel still accepts what the workers send; nothing answers.
func (e *Env) FreezeDatabase() {
	e.t.Helper()
	id := e.dbRes.Container.ID
	if err := e.pool.Client.PauseContainer(id); err == nil {
		e.dbFrozen = "freezer"
	} else if err2 := e.pool.Client.KillContainer(dc.KillContainerOptions{ID: id, Signal: dc.SIGSTOP}); err2 == nil {
		e.dbFrozen = "SIGSTOP"
	} else {
		e.t.Fatalf("freeze the database: %v; SIGSTOP: %v", err, err2)
	}
	e.Note("database frozen (%s)", e.dbFrozen)
}

// ThawDatabase resumes a frozen database the way it was frozen.
func (e *Env) ThawDatabase() {
	e.t.Helper()
	var err error
	switch e.dbFrozen {
	case "freezer":
		err = e.pool.Client.UnpauseContainer(e.dbRes.Container.ID)
	case "SIGSTOP":
		err = e.pool.Client.KillContainer(dc.KillContainerOptions{ID: e.dbRes.Container.ID, Signal: dc.SIGCONT})
	default:
		e.t.Fatal("thaw the database: not frozen")
	}
	if err != nil {
		e.t.Fatalf("thaw the database: %v", err)
	}
	e.dbFrozen = ""
	e.Note("database thawed")
	if !e.dbCut {
		e.connectDB() // the network may have been restored while it was frozen
	}
}
