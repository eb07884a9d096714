package main

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/flowrun/flow/internal/natsperm"
)

// envFile parses KEY=VALUE lines, skipping comments, as kustomize's secretGenerator does.
func envFile(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "line %q", line)
		out[k] = v
	}
	return out
}

// Every role gets a password, and the NATS servers its bcrypt hash; the route certificate
// serves every pod's name for both ends of a route.
func TestGenerate(t *testing.T) {
	t.Parallel()
	files, err := Generate(Options{Namespace: "flow", Replicas: 3, Days: 30, Cost: bcrypt.MinCost})
	require.NoError(t, err)
	plain, hashes := envFile(t, files[PasswordsFile]), envFile(t, files[HashesFile])
	require.Len(t, plain, len(natsperm.Roles()))
	for _, r := range natsperm.Roles() {
		pw, hash := plain[r.PasswordEnv], hashes[r.PasswordEnv]
		require.Len(t, pw, 32, "%s: 24 random bytes", r.PasswordEnv)
		require.NotContains(t, string(files[HashesFile]), pw, "the servers' file holds %s itself", r.PasswordEnv)
		require.NoError(t, bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)), r.PasswordEnv)
	}

	routes := string(files[RoutesFile])
	for i := range 3 {
		require.Contains(t, routes, "@"+podHost(i)+":6222\"")
	}

	block, _ := pem.Decode(files[RoutesCAFile])
	ca, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	block, _ = pem.Decode(files[RoutesCertFile])
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	for _, name := range []string{"nats-0.nats-headless", "nats-2.nats-headless.flow.svc.cluster.local"} {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
		require.NoError(t, err, name)
	}
	require.WithinDuration(t, time.Now().AddDate(0, 0, 30), leaf.NotAfter, time.Hour)
	key, _ := pem.Decode(files[RoutesKeyFile])
	_, err = x509.ParsePKCS8PrivateKey(key.Bytes)
	require.NoError(t, err)

	// Two runs share nothing.
	again, err := Generate(Options{Replicas: 1, Days: 1, Cost: bcrypt.MinCost, NoTLS: true})
	require.NoError(t, err)
	require.NotEqual(t, files[PasswordsFile], again[PasswordsFile])
	require.NotContains(t, again, RoutesCertFile)
}

// A second run refuses to replace the files, naming them, unless -force is given.
func TestRunRefusesToReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	args := []string{"-dir", dir, "-cost", "4", "-no-tls"}
	require.NoError(t, run(args))
	before, err := os.ReadFile(filepath.Join(dir, PasswordsFile))
	require.NoError(t, err)
	err = run(args)
	require.ErrorContains(t, err, PasswordsFile)
	require.ErrorContains(t, err, "-force")
	require.NoError(t, run(append(args, "-force")))
	after, err := os.ReadFile(filepath.Join(dir, PasswordsFile))
	require.NoError(t, err)
	require.NotEqual(t, before, after)

	require.ErrorContains(t, run([]string{"-dir", filepath.Join(dir, "missing")}), "not a directory")
	require.ErrorContains(t, run([]string{"-dir", dir, "-cost", "99"}), "cost 99")
}
