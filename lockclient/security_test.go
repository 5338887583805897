package lockclient_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// secureEtcd is an etcd member that requires TLS with client certificates and
// has auth enabled: a root user, and a user "locker" whose role may read and
// write only under the default lock prefix. It is the setup docs/design.md
// describes for production.
type secureEtcd struct {
	srv   *locktest.Cluster
	certs *locktest.Certs
}

const lockerPassword = "locker-secret"

func startSecureEtcd(t *testing.T) *secureEtcd {
	t.Helper()
	certs := locktest.NewCerts(t)
	srv := locktest.StartTLS(t, certs)
	s := &secureEtcd{srv: srv, certs: certs}
	root := s.client(t, "", "")
	ctx := t.Context()
	steps := []struct {
		what string
		do   func() error
	}{
		{"add root role", func() error {
			_, err := root.RoleAdd(ctx, "root")
			if errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
				return nil
			}
			return err
		}},
		{"add root user", func() error { _, err := root.UserAdd(ctx, "root", "root-secret"); return err }},
		{"grant root role", func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err }},
		{"add role", func() error { _, err := root.RoleAdd(ctx, "fencegate-locks"); return err }},
		{"grant prefix", func() error {
			p := defaultPrefix
			_, err := root.RoleGrantPermission(ctx, "fencegate-locks", p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"add locker", func() error { _, err := root.UserAdd(ctx, "locker", lockerPassword); return err }},
		{"grant locker", func() error { _, err := root.UserGrantRole(ctx, "locker", "fencegate-locks"); return err }},
		{"enable auth", func() error { _, err := root.AuthEnable(ctx); return err }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
	}
	return s
}

// client returns a TLS client of the member with the given credentials (none
// when user is empty).
func (s *secureEtcd) client(t *testing.T, user, password string) *clientv3.Client {
	t.Helper()
	cli, err := s.newClient(t, user, password)
	if err != nil {
		t.Fatalf("etcd client as %q: %v", user, err)
	}
	return cli
}

func (s *secureEtcd) newClient(t *testing.T, user, password string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.srv.Endpoints(),
		TLS:         s.certs.ClientTLS(t),
		Username:    user,
		Password:    password,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err == nil {
		t.Cleanup(func() { cli.Close() })
	}
	return cli, err
}

func TestClient_TLSAndAuth_rolePrefix(t *testing.T) {
	t.Parallel()
	s := startSecureEtcd(t)
	ctx := t.Context()
	cli := s.client(t, "locker", lockerPassword)
	// A longer TTL than other tests: TLS and auth slow every renewal on a
	// loaded machine, and this test checks that renewals work, not how fast.
	const ttl = 4 * time.Second
	var logs logBuffer
	c := newClient(t, cli, lockclient.WithTTL(ttl), lockclient.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))

	// Everything the client does works within the role's prefix.
	l := mustAcquire(t, c, "invoice-42")
	if _, err := c.TryAcquire(ctx, "invoice-42"); !errors.Is(err, lockclient.ErrHeld) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	if info, err := c.Holder(ctx, "invoice-42"); err != nil || info.Token != l.Token() {
		t.Fatalf("Holder: %+v, %v", info, err)
	}
	if infos, err := c.List(ctx); err != nil || len(infos) != 1 {
		t.Fatalf("List: %v, %v", infos, err)
	}
	m := mustAcquire(t, c, "manual", lockclient.WithManualRenewal(0))
	if err := m.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatalf("Release of the manual lock: %v", err)
	}
	// Session renewals go through: a lock outlives the TTL.
	auto := mustAcquire(t, c, "auto")
	time.Sleep(ttl + time.Second)
	if isClosed(auto.Done()) {
		t.Fatalf("session lost although renewals go through; log:\n%s", logs.buf.String())
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close (revokes the lease): %v", err)
	}

	// Outside the prefix every call says what is missing.
	outside := newClient(t, cli, lockclient.WithTTL(testTTL), lockclient.WithPrefix("/other/locks/"))
	_, err := outside.Acquire(ctx, "invoice-42")
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("Acquire outside the role's prefix: %v, want a permission error", err)
	}
	for _, want := range []string{`may not read and write keys under "/other/locks/"`, "grant its role readwrite", "permission denied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := outside.List(ctx); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("List outside the prefix: %v", err)
	}
	if err := outside.Release(ctx, "invoice-42", 5); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("Release outside the prefix: %v", err)
	}
}

func TestClient_TLSAndAuth_refused(t *testing.T) {
	t.Parallel()
	s := startSecureEtcd(t)

	// A wrong password is refused when the client logs in.
	if _, err := s.newClient(t, "locker", "wrong"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("wrong password: %v, want ErrAuthFailed", err)
	}
	// Without credentials, auth refuses every lock call.
	c := newClient(t, s.client(t, "", ""), lockclient.WithTTL(testTTL))
	if _, err := c.TryAcquire(t.Context(), "x"); err == nil {
		t.Error("TryAcquire without credentials succeeded")
	}
	// Without a client certificate the TLS handshake fails.
	noCert := s.certs.ClientTLS(t)
	noCert.Certificates = nil
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.srv.Endpoints(), TLS: noCert, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "k"); err == nil {
		t.Error("a client without a certificate read from etcd")
	}
}
