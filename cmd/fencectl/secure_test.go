package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/lockclient/locktest"
)

// TestRun_TLSAndAuth runs fencectl against an etcd that requires client
// certificates and has auth enabled, as a user whose role may read and write
// only the default lock prefix.
func TestRun_TLSAndAuth(t *testing.T) {
	certs := locktest.NewCerts(t)
	srv := locktest.StartTLS(t, certs)
	newCli := func(user, pw string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), TLS: certs.ClientTLS(t),
			Username: user, Password: pw, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	root := newCli("", "")
	ctx := t.Context()
	p := "/fencegate/locks/"
	steps := []func() error{
		func() error {
			_, err := root.RoleAdd(ctx, "root")
			if errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
				return nil
			}
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "root", "root-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "fencegate-locks"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "fencegate-locks", p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "locker", "locker-secret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "locker", "fencegate-locks"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	lc, err := lockclient.New(newCli("locker", "locker-secret"), lockclient.WithIdentity("secure-worker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	if _, err := lc.Acquire(ctx, "vault"); err != nil {
		t.Fatal(err)
	}

	eps := strings.Join(srv.Endpoints(), ",")
	tls := []string{"-endpoints", eps, "-cacert", certs.CAFile, "-cert", certs.ClientCert, "-key", certs.ClientKey}
	t.Setenv("FENCECTL_PASSWORD", "locker-secret")
	tests := []struct {
		name   string
		args   []string
		code   int
		out    string
		errOut string
	}{
		{"list", append(tls, "-user", "locker", "list"), 0, "secure-worker", ""},
		{"show", append(tls, "-user", "locker", "show", "vault"), 0, "vault", ""},
		{"wrong password", append(tls, "-user", "locker", "-password", "nope", "list"), 1, "", "refused the user or password"},
		{"outside the role's prefix", append(tls, "-user", "locker", "-prefix", "/other/", "list"), 1, "", `may not read and write keys under "/other/"`},
		{"no client certificate", []string{"-endpoints", eps, "-cacert", certs.CAFile, "-user", "locker", "-timeout", "2s", "list"}, 1, "", "cannot reach etcd at https://"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := fencectl(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.errOut) {
				t.Errorf("exit %d (want %d); stdout %q (want %q); stderr %q (want %q)", code, tc.code, out, tc.out, errOut, tc.errOut)
			}
		})
	}
}
