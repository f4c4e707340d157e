package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// testCA issues certificates for the tests. The tests run over the
// in-memory network, whose addresses are no host names: workers name the
// coordinator they expect in tls.Config.ServerName.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "weir test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{name},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestTLS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca := newTestCA(t)
		serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, "coordinator", x509.ExtKeyUsageServerAuth)}}
		_, addr, ev := startServer(t, ServerConfig{TLS: serverTLS})

		cfg := workerConfig(addr, "w1")
		cfg.TLS = &tls.Config{RootCAs: ca.pool, ServerName: "coordinator"}
		w := newWorker()
		startWorker(t, cfg, w)
		require.Equal(t, "w1", recv(t, ev.joined).ID)
		recv(t, w.sessions)

		// A worker that does not trust the CA, or speaks plain text, never
		// gets in.
		for name, c := range map[string]*tls.Config{"untrusted": {ServerName: "coordinator"}, "plain text": nil} {
			cfg := workerConfig(addr, "w2")
			cfg.TLS = c
			cfg.RetryTimeout = 150 * time.Millisecond
			err := RunWorker(context.Background(), cfg, newWorker())
			require.Error(t, err, name)
			t.Logf("%s: %v", name, err)
		}
		ev.noneLost(t)
	})
}

func TestMutualTLS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca := newTestCA(t)
		serverTLS := &tls.Config{
			Certificates: []tls.Certificate{ca.issue(t, "coordinator", x509.ExtKeyUsageServerAuth)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca.pool,
		}
		_, addr, ev := startServer(t, ServerConfig{TLS: serverTLS, Token: "and a token"})

		cfg := workerConfig(addr, "w1")
		cfg.Token = "and a token"
		cfg.TLS = &tls.Config{RootCAs: ca.pool, ServerName: "coordinator",
			Certificates: []tls.Certificate{ca.issue(t, "w1", x509.ExtKeyUsageClientAuth)}}
		startWorker(t, cfg, newWorker())
		info := recv(t, ev.joined)
		require.Equal(t, "w1", info.ID)

		// Without a client certificate, or with one from another CA, the
		// handshake fails.
		other := newTestCA(t)
		for name, certs := range map[string][]tls.Certificate{
			"no client certificate": nil,
			"foreign certificate":   {other.issue(t, "w2", x509.ExtKeyUsageClientAuth)},
		} {
			cfg := workerConfig(addr, "w2")
			cfg.Token = "and a token"
			cfg.TLS = &tls.Config{RootCAs: ca.pool, ServerName: "coordinator", Certificates: certs}
			cfg.RetryTimeout = 150 * time.Millisecond
			err := RunWorker(context.Background(), cfg, newWorker())
			require.Error(t, err, name)
			t.Logf("%s: %v", name, err)
		}
		ev.noneLost(t)
		select {
		case w := <-ev.joined:
			t.Fatalf("%q joined", w.ID)
		default:
		}
	})
}
