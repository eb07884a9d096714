package history

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
)

// uiListPage is the data of the runs list.
type uiListPage struct {
	Status      string
	Definition  string
	Prefix      string
	Limit       int
	Statuses    []string
	Definitions []string
	Runs        []core.Summary
	Total       int
	// Query is the filters' query string (without the cursor), for the live refresh.
	Query string
	// Next is the URL of the next page, "" on the last.
	Next template.URL
	Now  time.Time
}

// uiRuns serves the runs list, or its rows alone with ?fragment=rows.
func (s *Service) uiRuns(w http.ResponseWriter, r *http.Request) {
	req, err := listRequest(r)
	if err != nil {
		s.uiQueryError(w, err)
		return
	}
	if req.Limit == 0 {
		req.Limit = 100
	}
	q := r.URL.Query()
	prefix := strings.TrimSpace(q.Get("prefix"))
	resp, err := s.index.listPrefix(req, prefix)
	if err != nil {
		s.uiQueryError(w, err)
		return
	}
	page := uiListPage{Status: strings.Join(req.Status, ","), Definition: req.Definition, Prefix: prefix, Limit: req.Limit,
		Runs: resp.Runs, Total: resp.Total, Now: time.Now().UTC()}
	for _, st := range statuses {
		page.Statuses = append(page.Statuses, string(st))
	}
	page.Definitions = s.uiDefinitions(req.Definition)
	filters := url.Values{}
	for k, v := range map[string]string{"status": page.Status, "definition": page.Definition, "prefix": prefix} {
		if v != "" {
			filters.Set(k, v)
		}
	}
	if req.Limit != 100 {
		filters.Set("limit", fmt.Sprint(req.Limit))
	}
	page.Query = filters.Encode()
	if resp.Next != "" {
		next := url.Values{}
		for k, v := range filters {
			next[k] = v
		}
		next.Set("cursor", resp.Next)
		page.Next = template.URL("/ui/?" + next.Encode())
	}
	name := "runs.html"
	if q.Get("fragment") == "rows" {
		name = "runs-rows"
	}
	s.uiRender(w, http.StatusOK, name, page)
}

// uiDefinitions returns the definitions the filter offers: those workers serve, those of
// indexed runs, and selected, sorted.
func (s *Service) uiDefinitions(selected string) []string {
	seen := map[string]bool{}
	if selected != "" {
		seen[selected] = true
	}
	for _, d := range s.live.List() {
		seen[d.Definition] = true
	}
	s.index.where(func(sum core.Summary) bool {
		if sum.Definition != "" {
			seen[sum.Definition] = true
		}
		return false
	})
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// listPrefix answers a listing as list does, keeping only the runs whose ID starts with
// prefix ("" keeps all).
func (m *readModel) listPrefix(req api.ListRequest, prefix string) (api.ListResponse, error) {
	return m.listWhere(req, func(sum core.Summary) bool { return strings.HasPrefix(sum.RunID, prefix) })
}
