package cli_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
	return []string{"--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--http", "127.0.0.1:0", "--ingress-http", "127.0.0.1:0", "--log-level", "warn", "--no-worker"}
}

// TestDevToken: flow dev generates a bearer token at first start (finding 2 of item 8: it
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
// (item 8: it ignored them), for both HTTP APIs, and writes no token file.
func TestDevHonoursIngressTokens(t *testing.T) {
	t.Setenv("FLOW_INGRESS_TOKENS", "tok-one, tok-two")
	t.Setenv("FLOW_READ_TOKENS", "tok-read")
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
	dev.stopAndWait(t)
}
