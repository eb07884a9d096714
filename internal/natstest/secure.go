package natstest

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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// RunServer starts a nats-server configured by opts, for tests of how clients connect
// (credentials, TLS): on 127.0.0.1 and a free port unless opts say otherwise, with JetStream
// stored under t.TempDir() when opts.JetStream is set, shut down on cleanup. It changes opts.
func RunServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = -1
	}
	if opts.JetStream && opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("natstest: nats-server did not become ready within 10s")
	}
	return ns
}

// TLSFiles are PEM files for a test of TLS: a CA, a server certificate it signs for 127.0.0.1
// and localhost, and a client certificate it signs.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// Server verifies clients' certificates against the CA: set it as server.Options.TLSConfig
	// (with TLS and TLSVerify).
	Server *tls.Config
}

// GenerateTLS writes a CA and certificates it signs under dir.
func GenerateTLS(t testing.TB, dir string) TLSFiles {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("natstest: generating TLS files: %v", err)
		}
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		return k
	}
	serial := int64(0)
	template := func(cn string) *x509.Certificate {
		serial++
		return &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	}
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		must(os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		must(err)
		return write(name, "EC PRIVATE KEY", der)
	}

	caKey := newKey()
	caTmpl := template("flow test CA")
	caTmpl.IsCA, caTmpl.BasicConstraintsValid = true, true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)

	issue := func(cn string, usage x509.ExtKeyUsage, hosts bool) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := template(cn)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
		if hosts {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		must(err)
		return der, k
	}
	serverDER, serverKey := issue("nats-server", x509.ExtKeyUsageServerAuth, true)
	clientDER, clientKey := issue("flow-client", x509.ExtKeyUsageClientAuth, false)

	f := TLSFiles{
		CA:         write("ca.pem", "CERTIFICATE", caDER),
		ServerCert: write("server.pem", "CERTIFICATE", serverDER),
		ServerKey:  writeKey("server-key.pem", serverKey),
		ClientCert: write("client.pem", "CERTIFICATE", clientDER),
		ClientKey:  writeKey("client-key.pem", clientKey),
	}
	pair, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	must(err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	f.Server = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	return f
}

// Operator configures opts for decentralized authentication (an operator, one account in a
// memory resolver) and returns the contents of a .creds file of a user of that account.
func Operator(t testing.TB, opts *server.Options) []byte {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("natstest: setting up an operator: %v", err)
		}
	}
	// keyPair creates a key pair with create and returns it with its public key.
	keyPair := func(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string) {
		t.Helper()
		kp, err := create()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		return kp, pub
	}
	operator, operatorPub := keyPair(nkeys.CreateOperator)
	operatorJWT, err := jwt.NewOperatorClaims(operatorPub).Encode(operator)
	must(err)
	operatorClaims, err := jwt.DecodeOperatorClaims(operatorJWT)
	must(err)

	account, accountPub := keyPair(nkeys.CreateAccount)
	accountClaims := jwt.NewAccountClaims(accountPub)
	accountClaims.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	accountJWT, err := accountClaims.Encode(operator)
	must(err)

	user, userPub := keyPair(nkeys.CreateUser)
	userJWT, err := jwt.NewUserClaims(userPub).Encode(account)
	must(err)
	seed, err := user.Seed()
	must(err)
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	must(err)

	resolver := &server.MemAccResolver{}
	must(resolver.Store(accountPub, accountJWT))
	opts.TrustedOperators = []*jwt.OperatorClaims{operatorClaims}
	opts.AccountResolver = resolver
	return creds
}
