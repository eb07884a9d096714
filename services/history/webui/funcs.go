package webui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/pkg/event"
)

// uiFuncs are the templates' helpers.
var uiFuncs = template.FuncMap{
	"pretty": func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return "null"
		}
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			return string(raw)
		}
		return b.String()
	},
	"inline": inline,
	"clip":   clip,
	// join joins strings with sep.
	"join": strings.Join,
	// clock renders a time of day with milliseconds, UTC.
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("15:04:05.000")
	},
	// stamp renders a full UTC time.
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	// ago renders how long before now t was (or, negative, how long after).
	"ago": func(t, now time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := now.Sub(t)
		if d < 0 {
			return "in " + short(-d)
		}
		return short(d) + " ago"
	},
	// offset renders a time since the run started.
	"offset": func(d time.Duration) string { return "+" + short(d) },
	"dur":    func(d event.Duration) string { return time.Duration(d).String() },
	"runURL": func(runID string) string { return "/ui/runs/" + url.PathEscape(runID) },
	"atURL": func(runID string, at uint64) string {
		return "/ui/runs/" + url.PathEscape(runID) + "?at=" + fmt.Sprint(at)
	},
	"prev": func(n uint64) uint64 { return max(n, 2) - 1 },
	"next": func(n uint64) uint64 { return n + 1 },
	// statusClass names a status's colour.
	"statusClass": func(st any) string { return "st-" + fmt.Sprint(st) },
	"terminal":    func(st core.Status) bool { return st.Terminal() },
}

// short renders a duration with about three significant figures.
func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
