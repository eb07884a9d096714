package kubernetes_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// The routes the dev overlay configures form a cluster, and refuse a stranger: one that reaches
// the route port without the route user's password, and one that has it but no certificate of
// the routes' CA: otherwise any pod that reaches the headless service could join as a route and
// bypass every role. The servers run here with the rendered configuration of the
// pods nats-0 and nats-1, on 127.0.0.1 instead of the pods' names.
func TestRoutesRefuseStrangers(t *testing.T) {
	r := sortOut(t, mustBuild(t, devOverlay))
	load := func(i int) *server.Options {
		opts, err := mountNATSPod(t, r, i).load(t)
		require.NoError(t, err)
		require.NotNil(t, opts.Cluster.TLSConfig, "the routes have no TLS")
		require.NotEmpty(t, opts.Routes)
		local(opts)
		return opts
	}
	a, b := load(0), load(1)
	a.Routes = nil // a only accepts
	logA := newLineLogger()
	sa := startServer(t, a, logA)
	routeTo := func(u *url.URL) []*url.URL {
		v := *u
		v.Host = sa.ClusterAddr().String()
		return []*url.URL{&v}
	}
	b.Routes = routeTo(b.Routes[0]) // with the route user's credentials
	sb := startServer(t, b, newLineLogger())
	require.Eventually(t, func() bool {
		return slices.Equal(remotes(t, sa), []string{sb.ID()}) && slices.Equal(remotes(t, sb), []string{sa.ID()})
	}, 20*time.Second, 10*time.Millisecond,
		"nats-1 does not form a route with nats-0 with the overlay's credentials and certificates")

	t.Run("WithoutThePassword", func(t *testing.T) {
		c := b.Clone()
		local(c) // b's ports are taken
		c.ServerName = "stranger-without-password"
		c.Routes = routeTo(&url.URL{Scheme: "nats-route", Host: "placeholder"})
		startServer(t, c, newLineLogger())
		logA.wait(t, "authentication error")
		require.Equal(t, []string{sb.ID()}, remotes(t, sa), "a route without the password joined")
	})
	t.Run("WithoutTheCertificate", func(t *testing.T) {
		d := b.Clone()
		local(d)
		d.ServerName = "stranger-without-certificate"
		d.Routes = routeTo(b.Routes[0])
		tc := d.Cluster.TLSConfig.Clone()
		tc.Certificates = []tls.Certificate{strangerCert(t)}
		d.Cluster.TLSConfig = tc
		startServer(t, d, newLineLogger())
		logA.wait(t, "TLS route handshake error")
		require.Equal(t, []string{sb.ID()}, remotes(t, sa), "a route with a certificate of another CA joined")
	})
}

// local moves a pod's options to 127.0.0.1 and random ports, without JetStream or monitoring.
// The routes' TLS verifies the peer's name as nats-0.nats-headless, which the certificate holds
// with the other pods' names, since the routes go to 127.0.0.1.
func local(o *server.Options) {
	o.Host, o.Port, o.HTTPPort = "127.0.0.1", -1, 0
	o.Cluster.Host, o.Cluster.Port = "127.0.0.1", -1
	o.JetStream, o.PidFile, o.NoSigs = false, "", true
	o.Cluster.TLSConfig = o.Cluster.TLSConfig.Clone()
	o.Cluster.TLSConfig.ServerName = "nats-0.nats-headless"
}

// remotes are the IDs of the servers s has routes to.
func remotes(t *testing.T, s *server.Server) []string {
	t.Helper()
	rz, err := s.Routez(nil)
	require.NoError(t, err)
	var ids []string
	for _, r := range rz.Routes {
		if !slices.Contains(ids, r.RemoteID) {
			ids = append(ids, r.RemoteID)
		}
	}
	slices.Sort(ids)
	return ids
}

func startServer(t *testing.T, o *server.Options, log *lineLogger) *server.Server {
	t.Helper()
	s, err := server.NewServer(o)
	require.NoError(t, err)
	s.SetLogger(log, true, false)
	s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server %s does not start", o.ServerName)
	return s
}

// lineLogger hands the server's log lines to wait.
type lineLogger struct{ lines chan string }

func newLineLogger() *lineLogger { return &lineLogger{lines: make(chan string, 4096)} }

func (l *lineLogger) put(format string, v ...any) {
	select {
	case l.lines <- fmt.Sprintf(format, v...):
	default: // nobody waits for this many lines
	}
}

func (l *lineLogger) Noticef(format string, v ...any) { l.put(format, v...) }
func (l *lineLogger) Warnf(format string, v ...any)   { l.put(format, v...) }
func (l *lineLogger) Fatalf(format string, v ...any)  { l.put(format, v...) }
func (l *lineLogger) Errorf(format string, v ...any)  { l.put(format, v...) }
func (l *lineLogger) Debugf(format string, v ...any)  { l.put(format, v...) }
func (l *lineLogger) Tracef(format string, v ...any)  { l.put(format, v...) }

// wait returns when the server logs a line holding substr, case-insensitively.
func (l *lineLogger) wait(t *testing.T, substr string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case line := <-l.lines:
			if strings.Contains(strings.ToLower(line), strings.ToLower(substr)) {
				return
			}
		case <-deadline:
			t.Fatalf("the server logged no %q", substr)
		}
	}
}

// strangerCert is a certificate for the pods' names that another CA signed.
func strangerCert(t *testing.T) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "stranger CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "stranger"},
		DNSNames:  []string{"nats-0.nats-headless", "nats-1.nats-headless", "nats-2.nats-headless"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
