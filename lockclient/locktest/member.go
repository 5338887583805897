package locktest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/testserver"
)

// member is one etcd server process of a cluster. Its data directory outlives
// the process, so that Restart starts it again from its data.
type member struct {
	name      string
	dir       string
	peerURL   url.URL
	clientURL url.URL
	initial   string        // the initial-cluster string every member shares
	certs     *Certs        // client TLS, or nil for plain http
	heartbeat time.Duration // raft's; 0: etcd's default
	election  time.Duration // raft's election timeout; 0: etcd's default

	cmd    *exec.Cmd
	exited <-chan struct{}
	status *clientv3.Client // talks to this member only, for readiness and raft status
}

func (m *member) args() []string {
	a := []string{
		"--name", m.name,
		"--data-dir", filepath.Join(m.dir, "data"),
		"--listen-peer-urls", m.peerURL.String(),
		"--initial-advertise-peer-urls", m.peerURL.String(),
		"--listen-client-urls", m.clientURL.String(),
		"--advertise-client-urls", m.clientURL.String(),
		"--initial-cluster", m.initial,
		"--initial-cluster-token", "locktest",
		"--initial-cluster-state", "new",
		"--log-level", "error",
		"--metrics", "basic",
		"--enable-grpc-gateway=false",
	}
	if m.heartbeat > 0 {
		a = append(a, "--heartbeat-interval", strconv.FormatInt(m.heartbeat.Milliseconds(), 10))
	}
	if m.election > 0 {
		a = append(a, "--election-timeout", strconv.FormatInt(m.election.Milliseconds(), 10))
	}
	if m.certs != nil {
		a = append(a, "--cert-file", m.certs.ServerCert, "--key-file", m.certs.ServerKey,
			"--trusted-ca-file", m.certs.CAFile, "--client-cert-auth")
	}
	return a
}

// start runs the member's process and waits until it answers a Status call. Its
// stderr goes to a file in its directory, whose tail a start failure includes.
func (m *member) start(bin string) error {
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	logPath := filepath.Join(m.dir, "stderr.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, m.args()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	exited, err := testserver.StartChild(cmd)
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.name, err)
	}
	m.cmd, m.exited = cmd, exited
	if err := m.waitReady(); err != nil {
		m.stop()
		return fmt.Errorf("member %s: %w\n%s", m.name, err, tail(readFile(logPath)))
	}
	return nil
}

func (m *member) waitReady() error {
	cli, err := m.newClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = m.answers(ctx, cli)
		cancel()
		if err == nil {
			m.status = cli
			return nil
		}
		select {
		case <-m.exited:
			cli.Close()
			return fmt.Errorf("exited before it was ready: %v", m.cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cli.Close()
			return fmt.Errorf("not ready after %v: %w", startTimeout, err)
		}
	}
}

// answers reports whether this member answers on its client URL: not another etcd
// that took the port before the member could bind it.
func (m *member) answers(ctx context.Context, cli *clientv3.Client) error {
	resp, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return err
	}
	for _, mm := range resp.Members {
		if mm.ID == resp.Header.MemberId {
			if mm.Name == m.name && slices.Contains(mm.PeerURLs, m.peerURL.String()) {
				return nil
			}
			return fmt.Errorf("another etcd (%s, %v) answers on %s", mm.Name, mm.PeerURLs, m.clientURL.String())
		}
	}
	return fmt.Errorf("the etcd on %s is not in its own member list", m.clientURL.String())
}

func (m *member) newClient() (*clientv3.Client, error) {
	var tlsCfg *tls.Config
	if m.certs != nil {
		var err error
		if tlsCfg, err = m.certs.clientConfig(); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{m.clientURL.String()},
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cli, nil
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// running reports whether the member's process was started and not stopped.
func (m *member) running() bool { return m.cmd != nil }

// raftStatus returns the member's raft term and whether it is leader; ok is
// false when it is stopped or does not answer within a second.
func (m *member) raftStatus() (term uint64, leader, ok bool) {
	if m.cmd == nil || m.status == nil {
		return 0, false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := m.status.Status(ctx, m.clientURL.String())
	if err != nil {
		return 0, false, false
	}
	return resp.RaftTerm, resp.Leader != 0 && resp.Leader == resp.Header.MemberId, true
}

// stop kills the process as a crash would (SIGKILL: no leadership transfer, no
// flush beyond what raft already synced) and waits for it to exit. The data stays
// for Restart.
func (m *member) stop() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	if m.status != nil {
		m.status.Close()
		m.status = nil
	}
	m.cmd = nil
}
