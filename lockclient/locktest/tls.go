package locktest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// StartTLS starts a single etcd member like Start whose clients must use TLS
// with a client certificate of certs (the server's certificate is certs', client
// certificates are required and checked against its CA), and stops it when the
// test ends. Its client URL uses https. Cluster.Client makes plain clients, which
// such a member refuses; tests build their own with Certs.ClientTLS.
func StartTLS(t testing.TB, certs *Certs) *Cluster {
	t.Helper()
	if certs == nil {
		t.Fatal("locktest: StartTLS with nil certs")
	}
	return StartConfig(t, Config{Members: 1, Certs: certs})
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

// ClientTLS is the client side for clientv3.Config.TLS: the client
// certificate, and the server's checked against the CA.
func (c *Certs) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	cfg, err := c.clientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func (c *Certs) clientConfig() (*tls.Config, error) {
	cfg, err := transport.TLSInfo{CertFile: c.ClientCert, KeyFile: c.ClientKey, TrustedCAFile: c.CAFile}.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("client tls: %w", err)
	}
	return cfg, nil
}
