package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"strconv"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/flowrun/flow/internal/natsperm"
)

// The files Generate returns, by name in the overlay's directory, and the Secrets the overlay
// generates from them (overlays/dev/kustomization.yaml).
const (
	// PasswordsFile holds NATS_<ROLE>_PASSWORD=<password> for every role: Secret
	// flow-nats-passwords, of which each Flow service takes its own key. No NATS pod reads it.
	PasswordsFile = "nats-passwords.env"
	// HashesFile holds NATS_<ROLE>_PASSWORD=<bcrypt hash> for every role: Secret
	// flow-nats-password-hashes, the NATS pods' environment, which auth.conf resolves.
	HashesFile = "nats-password-hashes.env"
	// RoutesFile is included in nats.conf's cluster block: the route user, its password and a
	// route to each server with them. Secret flow-nats-routes.
	RoutesFile = "nats-routes.conf"
	// The routes' TLS: Secret flow-nats-routes-tls, of type kubernetes.io/tls, as cert-manager
	// writes it (tls.crt, tls.key, ca.crt).
	RoutesCAFile   = "nats-routes-ca.crt"
	RoutesCertFile = "nats-routes-tls.crt"
	RoutesKeyFile  = "nats-routes-tls.key"
	// TokensFile holds one ingress bearer token: Secret flow-ingress-tokens.
	TokensFile = "ingress-tokens"
)

// RouteUser is the user nats-server's routes authenticate as.
const RouteUser = "flow-route"

// StatefulSet and HeadlessService name the NATS pods the routes go to:
// <StatefulSet>-<i>.<HeadlessService>:6222 (base/nats/statefulset.yaml, services.yaml).
const (
	StatefulSet     = "nats"
	HeadlessService = "nats-headless"
)

// Options are Generate's settings; the zero value is not valid (Replicas, Days and Cost must
// be positive), main sets the defaults.
type Options struct {
	// Namespace, when set, adds <pod>.<headless>.<Namespace>.svc[.cluster.local] to the route
	// certificate's names, besides <pod>.<headless>, the names the routes use.
	Namespace string
	// Replicas is the number of NATS servers, each one a route.
	Replicas int
	// Days is the route CA's and certificate's validity.
	Days int
	// Cost is the bcrypt cost of the password hashes.
	Cost int
	// NoTLS leaves out the route CA and certificate.
	NoTLS bool
	// Now is the certificates' start of validity; zero means time.Now.
	Now time.Time
}

const header = "# Written by `make k8s-secrets` (deploy/kubernetes/gensecrets): SECRET, keep it out of git.\n" +
	"# (The dev overlay's copy is the exception: committed, public, for throwaway clusters only.)\n"

// Generate returns the overlay's secret files by name, every value drawn anew from crypto/rand.
func Generate(o Options) (map[string][]byte, error) {
	if o.Replicas < 1 || o.Days < 1 || o.Cost < bcrypt.MinCost || o.Cost > bcrypt.MaxCost {
		return nil, fmt.Errorf("nats-replicas %d, days %d, cost %d: want at least one replica and day, and a cost in [%d, %d]",
			o.Replicas, o.Days, o.Cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	files := map[string][]byte{}
	var plain, hashes bytes.Buffer
	plain.WriteString(header + "# The NATS users' passwords, for Flow's services: each one takes its own key.\n")
	hashes.WriteString(header + "# The bcrypt hashes of the NATS users' passwords, for the NATS servers: auth.conf resolves\n" +
		"# password: $NATS_<ROLE>_PASSWORD from the environment, and nats-server compares a hash as bcrypt.\n")
	for _, r := range natsperm.Roles() {
		pw := random(24)
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), o.Cost)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&plain, "%s=%s\n", r.PasswordEnv, pw)
		fmt.Fprintf(&hashes, "%s=%s\n", r.PasswordEnv, hash)
	}
	files[PasswordsFile] = plain.Bytes()
	files[HashesFile] = hashes.Bytes()

	routePW := random(24)
	var routes bytes.Buffer
	routes.WriteString(header + "# Included in nats.conf's cluster block: a route authenticates as this user, and each server\n" +
		"# solicits a route to every server of the StatefulSet with these credentials.\n")
	fmt.Fprintf(&routes, "authorization {\n  user: %s\n  password: %s\n  timeout: 2\n}\nroutes: [\n", strconv.Quote(RouteUser), strconv.Quote(routePW))
	for i := range o.Replicas {
		fmt.Fprintf(&routes, "  %s\n", strconv.Quote(fmt.Sprintf("nats-route://%s:%s@%s:6222", RouteUser, routePW, podHost(i))))
	}
	routes.WriteString("]\n")
	files[RoutesFile] = routes.Bytes()

	files[TokensFile] = []byte(header + "# The ingress's bearer tokens, one per line.\n" + random(32) + "\n")

	if !o.NoTLS {
		ca, cert, key, err := routeCerts(o)
		if err != nil {
			return nil, err
		}
		files[RoutesCAFile], files[RoutesCertFile], files[RoutesKeyFile] = ca, cert, key
	}
	return files, nil
}

// podHost is the name of the NATS pod i in the headless Service, as the routes name it.
func podHost(i int) string { return fmt.Sprintf("%s-%d.%s", StatefulSet, i, HeadlessService) }

// RouteNames are the DNS names the route certificate holds.
func RouteNames(o Options) []string {
	var names []string
	for i := range o.Replicas {
		h := podHost(i)
		names = append(names, h)
		if o.Namespace != "" {
			names = append(names, h+"."+o.Namespace+".svc", h+"."+o.Namespace+".svc.cluster.local")
		}
	}
	return names
}

// random returns n bytes from crypto/rand, base64url-encoded: safe in an env file, a
// configuration string and a URL's user info.
func random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// routeCerts returns a self-signed CA and a certificate it signs for every server, valid for
// both ends of a route (server and client authentication), in PEM.
func routeCerts(o Options) (caPEM, certPEM, keyPEM []byte, err error) {
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	notBefore, notAfter := now.Add(-time.Hour), now.AddDate(0, 0, o.Days)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "flow nats routes CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: RouteUser},
		DNSNames:     RouteNames(o),
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
