package cli_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// devToken returns the bearer token flow dev d generated into its data directory.
func devToken(t *testing.T, d *devRun) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, "token"))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// devAddrs returns the history and ingress HTTP addresses flow dev d printed.
func devAddrs(t *testing.T, d *devRun) (history, ingress string) {
	t.Helper()
	h := regexp.MustCompile(`History\s+http://(\S+)/v1/runs`).FindStringSubmatch(d.out.String())
	i := regexp.MustCompile(`Ingress\s+http://(\S+) `).FindStringSubmatch(d.out.String())
	require.NotNil(t, h, d.out.String())
	require.NotNil(t, i, d.out.String())
	return h[1], i[1]
}

// status sends method url with token ("" sends none) and returns the status.
func status(t *testing.T, method, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

func devArgs(t *testing.T) []string {
	return []string{"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--http", "127.0.0.1:0", "--ingress-http", "127.0.0.1:0", "--no-worker"}
}

// TestDevToken: flow dev generates a bearer token at first start (it once
// could not turn tokens on, so any web page could act through its ingress), stores it with
// mode 0600, shows it once, reuses it on later starts, and both HTTP APIs require it;
// --insecure requires none.
func TestDevToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dev := startDevIn(t, dir, devArgs(t)...)
	token := devToken(t, dev)
	require.True(t, strings.HasPrefix(token, "flow_"), token)
	fi, err := os.Stat(filepath.Join(dir, "token"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.Equal(t, 1, strings.Count(dev.out.String(), token), "the token is shown once:\n%s", dev.out.String())
	history, ingress := devAddrs(t, dev)
	require.Equal(t, http.StatusUnauthorized, status(t, http.MethodGet, "http://"+history+"/v1/runs", ""))
	require.Equal(t, http.StatusOK, status(t, http.MethodGet, "http://"+history+"/v1/runs", token))
	require.Equal(t, http.StatusUnauthorized, status(t, http.MethodPost, "http://"+ingress+"/v1/runs/nobody/cancel", ""))
	require.Equal(t, http.StatusNotFound, status(t, http.MethodPost, "http://"+ingress+"/v1/runs/nobody/cancel", token))
	dev.stopAndWait(t)

	again := startDevIn(t, dir, devArgs(t)...)
	require.NotContains(t, again.out.String(), token, "a later start does not show the token again")
	require.Contains(t, again.out.String(), filepath.Join(dir, "token"), "it says where the token is")
	require.Equal(t, token, devToken(t, again), "the token is reused")
	history, _ = devAddrs(t, again)
	require.Equal(t, http.StatusOK, status(t, http.MethodGet, "http://"+history+"/v1/runs", token))
	again.stopAndWait(t)

	insecure := startDev(t, append(devArgs(t), "--insecure")...)
	_, err = os.Stat(filepath.Join(insecure.dir, "token"))
	require.ErrorIs(t, err, os.ErrNotExist)
	history, _ = devAddrs(t, insecure)
	require.Equal(t, http.StatusOK, status(t, http.MethodGet, "http://"+history+"/v1/runs", ""))
	require.Contains(t, insecure.out.String(), "--insecure")
	insecure.stopAndWait(t)
}

// TestDevHonoursIngressTokens: flow dev takes FLOW_INGRESS_TOKENS as flowd's ingress does
// (it once ignored them), for both HTTP APIs, and writes no token file; the services' other
// settings come from the environment too (a body limit here).
func TestDevHonoursIngressTokens(t *testing.T) {
	t.Setenv("FLOW_INGRESS_TOKENS", "tok-one, tok-two")
	t.Setenv("FLOW_READ_TOKENS", "tok-read")
	t.Setenv("FLOW_INGRESS_MAX_BODY_BYTES", "64")
	dev := startDev(t, devArgs(t)...)
	_, err := os.Stat(filepath.Join(dev.dir, "token"))
	require.ErrorIs(t, err, os.ErrNotExist)
	history, ingress := devAddrs(t, dev)
	require.Equal(t, http.StatusUnauthorized, status(t, http.MethodPost, "http://"+ingress+"/v1/runs/nobody/cancel", ""))
	require.Equal(t, http.StatusNotFound, status(t, http.MethodPost, "http://"+ingress+"/v1/runs/nobody/cancel", "tok-two"))
	require.Equal(t, http.StatusUnauthorized, status(t, http.MethodPost, "http://"+ingress+"/v1/runs/nobody/cancel", "tok-read"), "a read-only token cannot act at the ingress")
	require.Equal(t, http.StatusUnauthorized, status(t, http.MethodGet, "http://"+history+"/v1/runs", ""))
	require.Equal(t, http.StatusOK, status(t, http.MethodGet, "http://"+history+"/v1/runs", "tok-one"))
	require.Equal(t, http.StatusOK, status(t, http.MethodGet, "http://"+history+"/v1/runs", "tok-read"))
	require.Equal(t, http.StatusForbidden, status(t, http.MethodPost, "http://"+history+"/v1/runs/nobody/resume", "tok-read"))

	big, err := http.NewRequest(http.MethodPost, "http://"+ingress+"/v1/runs/nobody/cancel", strings.NewReader(`{"reason":"`+strings.Repeat("x", 100)+`"}`))
	require.NoError(t, err)
	big.Header.Set("Content-Type", "application/json")
	big.Header.Set("Authorization", "Bearer tok-one")
	resp, err := http.DefaultClient.Do(big)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "FLOW_INGRESS_MAX_BODY_BYTES reaches flow dev's ingress")
	dev.stopAndWait(t)
}

// TestStatusSecrets: `flow status` shows a hook's token redacted (the client
// role once read every hook token over NATS); --secrets reads it over HTTP with the token flow dev wrote,
// found through FLOW_DIR, as a user of flow dev does without configuring anything.
func TestStatusSecrets(t *testing.T) {
	dev, url := startDevListening(t, "--http", "127.0.0.1:0", "--ingress-http", "127.0.0.1:0")
	history, _ := devAddrs(t, dev)
	t.Setenv("FLOW_DIR", dev.dir)
	t.Setenv("FLOW_HISTORY_URL", "http://"+history)
	nats := "--server=" + url
	r := run(t, "start", "webhook", "--id", "wh-1", nats)
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r = run(t, "status", "wh-1", nats)
		return r.code == 0 && strings.Contains(r.stdout, "Hook callback") && strings.Contains(r.stdout, "announce-hook") && strings.Contains(r.stdout, "completed")
	}, 30*time.Second, 20*time.Millisecond, "the webhook run announces its hook")
	require.Contains(t, r.stdout, "token redacted:callback")
	revealed := run(t, "status", "wh-1", "--secrets", nats)
	require.Equal(t, 0, revealed.code, revealed.stderr)
	m := regexp.MustCompile(`Hook callback: token ([a-z2-7]{32})`).FindStringSubmatch(revealed.stdout)
	require.NotNil(t, m, revealed.stdout)
	require.NotContains(t, r.stdout, m[1])

	t.Setenv("FLOW_DIR", t.TempDir()) // no token there
	refused := run(t, "status", "wh-1", "--secrets", nats)
	require.Equal(t, 1, refused.code)
	require.Contains(t, refused.stderr, "FLOW_TOKEN")
	dev.stopAndWait(t)
}
