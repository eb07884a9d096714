package webui

import (
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
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
	// Where is the filter expression (docs/search.md); WhereError says why it was refused.
	Where      string
	WhereError string
	// Fields lists what a filter may name, "name (type)", for the filter box's hint.
	Fields []string
}

// uiRuns serves the runs list, or its rows alone with ?fragment=rows.
func (s *UI) uiRuns(w http.ResponseWriter, r *http.Request) {
	req, err := s.reader.ListRequest(r)
	if err != nil {
		s.uiQueryError(w, err)
		return
	}
	if req.Limit == 0 {
		req.Limit = 100
	}
	q := r.URL.Query()
	prefix := strings.TrimSpace(q.Get("prefix"))
	req.Where = strings.TrimSpace(req.Where)
	resp, err := s.reader.ListRuns(req, prefix)
	status, whereErr := http.StatusOK, ""
	if err != nil {
		var ae *api.Error
		if req.Where == "" || !errors.As(err, &ae) || ae.Code != api.CodeInvalid || !strings.Contains(ae.Message, "invalid filter") {
			s.uiQueryError(w, err)
			return
		}
		// A filter that does not compile is shown in the page, next to the box, to be fixed.
		status, whereErr, resp = http.StatusBadRequest, ae.Message, api.ListResponse{Runs: []core.Summary{}}
	}
	page := uiListPage{Status: strings.Join(req.Status, ","), Definition: req.Definition, Prefix: prefix, Limit: req.Limit,
		Runs: resp.Runs, Total: resp.Total, Now: time.Now().UTC(), Where: req.Where, WhereError: whereErr,
		Fields: s.filterFields(req.Definition)}
	for _, st := range s.reader.Statuses() {
		page.Statuses = append(page.Statuses, string(st))
	}
	page.Definitions = s.uiDefinitions(req.Definition)
	filters := url.Values{}
	for k, v := range map[string]string{"status": page.Status, "definition": page.Definition, "prefix": prefix, "where": req.Where} {
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
	s.uiRender(w, status, name, page)
}

// filterFields lists what a filter of the runs of definition may name, "name (type)".
func (s *UI) filterFields(definition string) []string {
	var out []string
	for _, b := range filter.Builtins() {
		out = append(out, b.Name+" ("+string(b.Type)+")")
	}
	sch := s.reader.FilterSchema(definition)
	for _, name := range slices.Sorted(maps.Keys(sch.Attributes)) {
		out = append(out, name+" ("+string(sch.Attributes[name])+")")
	}
	return out
}

// uiDefinitions returns the definitions the filter offers: those workers serve, those of
// indexed runs, and selected, sorted.
func (s *UI) uiDefinitions(selected string) []string {
	seen := map[string]bool{}
	if selected != "" {
		seen[selected] = true
	}
	for _, d := range s.reader.Definitions() {
		seen[d] = true
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
