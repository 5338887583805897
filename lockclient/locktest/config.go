package locktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// StartWithConfig starts a single etcd member like Start, after configure has
// adjusted its configuration (TLS, auth token settings, quotas), and stops it
// when the test ends. When configure sets ClientTLSInfo, the client URLs use
// https. Server.Client makes plain clients without TLS or credentials; tests
// of such servers build their own (see Certs.ClientTLS).
func StartWithConfig(t testing.TB, configure func(*embed.Config)) *Server {
	t.Helper()
	dir := t.TempDir()
	m := &member{
		name:      "m0",
		dir:       filepath.Join(dir, "m0"),
		peerURL:   url.URL{Scheme: "http", Host: freeAddr(t)},
		clientURL: url.URL{Scheme: "http", Host: freeAddr(t)},
	}
	m.initial = m.name + "=" + m.peerURL.String()
	cfg := m.config()
	if configure != nil {
		configure(cfg)
	}
	if !cfg.ClientTLSInfo.Empty() {
		m.clientURL.Scheme = "https"
		cfg.ListenClientUrls = []url.URL{m.clientURL}
		cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	}
	c := &Cluster{t: t, members: []*member{m}}
	t.Cleanup(c.stopAll)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("locktest: start member: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		t.Fatalf("locktest: member failed: %v", err)
	case <-time.After(startTimeout):
		e.Close()
		t.Fatalf("locktest: member not ready after %v", startTimeout)
	}
	m.etcd = e
	return &Server{c: c}
}

// Certs is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, as PEM files in a test's temporary
// directory.
type Certs struct {
	CAFile                string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts generates a CA and its two certificates (ECDSA P-256, valid for a
// day).
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "locktest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{CAFile: filepath.Join(dir, "ca.pem")}
	writePEM(t, c.CAFile, "CERTIFICATE", caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	c.ServerCert, c.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return c
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ServerTLS is the server side for embed.Config.ClientTLSInfo: the server
// certificate, and client certificates required and checked against the CA.
func (c *Certs) ServerTLS() transport.TLSInfo {
	return transport.TLSInfo{CertFile: c.ServerCert, KeyFile: c.ServerKey, TrustedCAFile: c.CAFile, ClientCertAuth: true}
}

// ClientTLS is the client side for clientv3.Config.TLS: the client
// certificate, and the server's checked against the CA.
func (c *Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := transport.TLSInfo{CertFile: c.ClientCert, KeyFile: c.ClientKey, TrustedCAFile: c.CAFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
