package history_test

import (
	"net/http"
	"testing"

	"github.com/flowrun/flow/internal/historytest"
)

// page is one answer of the web UI (historytest.Page).
type page struct {
	status int
	header http.Header
	body   string
}

func pageOf(p historytest.Page) page { return page{status: p.Status, header: p.Header, body: p.Body} }

// uiGet fetches path from the history service's HTTP listener, not following redirects.
func uiGet(t *testing.T, base, path string) page {
	t.Helper()
	return pageOf(historytest.Get(t, base, path))
}

// uiPost posts body with contentType and the given Origin ("" sends none).
func uiPost(t *testing.T, base, path, contentType, origin, body string) page {
	t.Helper()
	return pageOf(historytest.Post(t, base, path, contentType, origin, body))
}

// csrfOf returns the CSRF token of a page.
func csrfOf(t *testing.T, body string) string {
	t.Helper()
	return historytest.CSRFOf(t, body)
}

// text returns the text of the first element with id, tags stripped.
func (p page) text(t *testing.T, id string) string {
	t.Helper()
	return historytest.Page{Body: p.body}.Text(t, id)
}
