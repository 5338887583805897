//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one etcd container.
type Member struct {
	Name string // container name, which is also its host name on the etcd network
	env  *Env
	res  *dockertest.Resource
}

func (e *Env) startMember(i int) *Member {
	var peers []string
	for j := 1; j <= 3; j++ {
		n := e.name(fmt.Sprintf("etcd%d", j))
		peers = append(peers, fmt.Sprintf("%s=http://%s:2380", n, n))
	}
	name := e.name(fmt.Sprintf("etcd%d", i))
	m := &Member{Name: name, env: e}
	m.res = e.run(&dockertest.RunOptions{
		Name: name, Hostname: name, Repository: e.images.Etcd,
		NetworkID: e.etcdNet.Network.ID,
		Cmd: []string{
			"--name", name,
			"--data-dir", "/data",
			"--listen-client-urls", "http://0.0.0.0:2379",
			"--advertise-client-urls", "http://" + name + ":2379",
			"--listen-peer-urls", "http://0.0.0.0:2380",
			"--initial-advertise-peer-urls", "http://" + name + ":2380",
			"--initial-cluster", strings.Join(peers, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", e.id,
			"--log-level", "warn",
			// A container kill loses no page cache, so skipping fsync loses nothing
			// these scenarios test (power loss is not one of them); fsync through
			// fuse-overlayfs would dominate every write.
			"--unsafe-no-fsync",
		},
	}, "2379/tcp")
	return m
}

// Endpoints are the client URLs workers use, on the etcd network.
func (e *Env) Endpoints() string {
	var eps []string
	for _, m := range e.Members {
		eps = append(eps, "http://"+m.Name+":2379")
	}
	return strings.Join(eps, ",")
}

// hostClient returns a client of one member from the host, through its published
// port (which changes when the member restarts).
func (m *Member) hostClient() (*clientv3.Client, string, error) {
	port, err := m.env.hostPort(m.res, "2379/tcp")
	if err != nil {
		return nil, "", err
	}
	ep := "127.0.0.1:" + port
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	return cli, ep, err
}

// Status asks the member itself for its raft status.
func (m *Member) Status(ctx context.Context) (*clientv3.StatusResponse, error) {
	cli, ep, err := m.hostClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cli.Status(ctx, ep)
}

// waitEtcd waits until every member answers and agrees on a leader.
func (e *Env) waitEtcd() {
	err := e.pool.Retry(func() error {
		var leader uint64
		for _, m := range e.Members {
			st, err := m.Status(e.t.Context())
			if err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
				return fmt.Errorf("%s: no agreed leader yet", m.Name)
			}
			leader = st.Leader
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("etcd cluster did not come up: %v", err)
	}
}

// Leader returns the member that is the raft leader now, asking the members that
// answer.
func (e *Env) Leader() (*Member, error) {
	for _, m := range e.Members {
		st, err := m.Status(e.t.Context())
		if err != nil || st.Leader == 0 {
			continue
		}
		for _, c := range e.Members {
			cs, err := c.Status(e.t.Context())
			if err == nil && cs.Header.MemberId == st.Leader {
				return c, nil
			}
		}
	}
	return nil, errors.New("no member reports a reachable leader")
}

// Kill SIGKILLs the member's process.
func (m *Member) Kill() {
	m.env.t.Helper()
	if err := m.env.pool.Client.KillContainer(dc.KillContainerOptions{ID: m.res.Container.ID, Signal: dc.SIGKILL}); err != nil {
		m.env.t.Fatalf("kill %s: %v", m.Name, err)
	}
	m.env.Note("SIGKILL etcd member %s", m.Name)
}

// Restart starts the killed member's container again, with its data directory as it
// was, so it rejoins the cluster as the same member.
func (m *Member) Restart() {
	m.env.t.Helper()
	m.env.restart(m.res, m.Name)
	m.env.Note("restart etcd member %s", m.Name)
}

// Rejoined reports whether the member answers, follows the cluster's leader and has
// applied the log up to at least index.
func (m *Member) Rejoined(ctx context.Context, index uint64) bool {
	st, err := m.Status(ctx)
	return err == nil && st.Leader != 0 && st.RaftAppliedIndex >= index
}
