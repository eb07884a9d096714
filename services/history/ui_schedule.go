package history

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// The schedules pages of the web UI (docs/schedules.md), read through the ingress like the
// CLI's `flow schedule list` and `describe`:
//
//	GET /ui/schedules           every schedule: spec, definition, overlap, state, next action
//	GET /ui/schedules/{name}    one schedule: spec, policies, state, recent actions (slot, run,
//	                            outcome) and the next action times

// uiSchedulesPage is the data of schedules.html.
type uiSchedulesPage struct {
	Schedules []uiScheduleRow
	Now       time.Time
	Error     string
}

// uiScheduleRow is one schedule of the list, with its spec rendered.
type uiScheduleRow struct {
	flow.ScheduleDescription
	Spec string
}

// uiSchedulePage is the data of schedule.html.
type uiSchedulePage struct {
	flow.ScheduleDescription
	Spec    string
	Catchup time.Duration
	Now     time.Time
}

// mountScheduleUI adds the schedules pages.
func (s *Service) mountScheduleUI(mux *http.ServeMux, client *flow.Client) {
	mux.HandleFunc("GET /ui/schedules", func(w http.ResponseWriter, r *http.Request) {
		page := uiSchedulesPage{Now: time.Now().UTC()}
		if client == nil {
			page.Error = errNoClient.Error()
		} else {
			ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
			defer cancel()
			list, err := client.Schedules().List(ctx)
			if err != nil {
				page.Error = strings.TrimPrefix(err.Error(), "flow: ")
			}
			for _, d := range list {
				page.Schedules = append(page.Schedules, uiScheduleRow{ScheduleDescription: d, Spec: scheduleSpec(d.Schedule.Spec)})
			}
		}
		s.uiRender(w, http.StatusOK, "schedules.html", page)
	})
	mux.HandleFunc("GET /ui/schedules/{name}", func(w http.ResponseWriter, r *http.Request) {
		if client == nil {
			s.uiError(w, http.StatusServiceUnavailable, "Unavailable", errNoClient.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), uiActionTimeout)
		defer cancel()
		d, err := client.Schedules().Describe(ctx, r.PathValue("name"), &flow.DescribeScheduleOptions{Next: 10})
		switch {
		case errors.Is(err, flow.ErrScheduleNotFound):
			s.uiError(w, http.StatusNotFound, "Not found", fmt.Sprintf("There is no schedule %q; see the schedules list.", r.PathValue("name")))
			return
		case err != nil:
			s.uiError(w, http.StatusBadGateway, "Schedules unavailable", strings.TrimPrefix(err.Error(), "flow: "))
			return
		}
		cw := time.Duration(d.Schedule.CatchupWindow)
		if cw == 0 {
			cw = schedule.DefaultCatchupWindow
		}
		s.uiRender(w, http.StatusOK, "schedule.html", uiSchedulePage{ScheduleDescription: *d, Spec: scheduleSpec(d.Schedule.Spec), Catchup: cw,
			Now: time.Now().UTC()})
	})
}

// scheduleSpec renders a schedule's spec in a line.
func scheduleSpec(sp schedule.Spec) string {
	var out string
	if sp.Cron != "" {
		tz := sp.TZ
		if tz == "" {
			tz = "UTC"
		}
		out = fmt.Sprintf("cron %q in %s", sp.Cron, tz)
	} else {
		out = "every " + time.Duration(sp.Every).String()
		if sp.Offset != 0 {
			out += " offset " + time.Duration(sp.Offset).String()
		}
	}
	if sp.Jitter != 0 {
		out += ", jitter " + time.Duration(sp.Jitter).String()
	}
	return out
}

// scheduleSummary renders run.started's schedule for the timeline ("" for none).
func scheduleSummary(p *event.RunStarted) string {
	if p.Schedule == nil {
		return ""
	}
	return fmt.Sprintf(", by schedule %s for slot %s (%s)", p.Schedule.Name, p.Schedule.Slot.Format("2006-01-02 15:04:05"), p.Schedule.Action)
}
