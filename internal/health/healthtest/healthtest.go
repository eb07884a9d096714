// Package healthtest helps tests read the probe and metrics endpoints of Flow's services.
package healthtest

import (
	"io"
	"net/http"
	"testing"
)

// Get GETs url and returns the status code, the Content-Type and the body. A request that gets
// no answer fails the test.
func Get(t testing.TB, url string) (code int, contentType, body string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
