package history

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
	"github.com/flowrun/flow/services/history/webui"
)

// mountUI adds the web UI's routes (package webui) to mux: its pages read through uiReader,
// its sign-in and callers through uiAuth, and its actions go to the ingress's HTTP API.
func (s *Service) mountUI(mux *http.ServeMux) {
	cfg := webui.Config{Reader: uiReader{s}, Auth: uiAuth{s}, Logger: s.logger}
	// The schedules and batch pages read through a client (over NATS).
	client, err := flow.NewClient(context.Background(), s.nc, &flow.ClientOptions{Logger: s.logger})
	if err != nil {
		s.logger.Error("the web UI cannot list schedules and batch jobs", slog.String("error", err.Error()))
	} else {
		cfg.Jobs = uiJobs{client}
	}
	switch {
	case s.cfg.IngressURLOf != nil:
		cfg.IngressURL = s.cfg.IngressURLOf
	case s.cfg.IngressURL != "off":
		cfg.IngressURL = func() string { return s.cfg.IngressURL }
	}
	webui.New(cfg).Mount(mux)
}

// uiJobs is the client's schedule and batch reads as the web UI reads them (webui.Jobs).
type uiJobs struct{ c *flow.Client }

func (j uiJobs) ListSchedules(ctx context.Context) ([]flow.ScheduleDescription, error) {
	return j.c.Schedules().List(ctx)
}

func (j uiJobs) DescribeSchedule(ctx context.Context, name string, recent int) (*flow.ScheduleDescription, error) {
	return j.c.Schedules().Describe(ctx, name, recent)
}

func (j uiJobs) Batches(ctx context.Context, limit int, states ...flow.BatchState) ([]flow.BatchJob, error) {
	return j.c.Batches().List(ctx, &flow.BatchListOptions{Limit: limit, States: states})
}

func (j uiJobs) Batch(ctx context.Context, id string) (*flow.BatchJob, error) {
	return j.c.Batches().Get(ctx, id)
}

// uiReader is the read API as the web UI reads it (webui.Reader).
type uiReader struct{ s *Service }

func (u uiReader) ListRequest(r *http.Request) (api.ListRequest, error) { return listRequest(r) }

func (u uiReader) ListRuns(req api.ListRequest, prefix string) (api.ListResponse, error) {
	return u.s.listRuns(req, func(sum core.Summary) bool { return strings.HasPrefix(sum.RunID, prefix) })
}

func (u uiReader) Statuses() []core.Status { return statuses }

func (u uiReader) Definitions() []string {
	var out []string
	for _, d := range u.s.live.List() {
		out = append(out, d.Definition)
	}
	u.s.index.where(func(sum core.Summary) bool {
		if sum.Definition != "" {
			out = append(out, sum.Definition)
		}
		return false
	})
	return out
}

func (u uiReader) FilterSchema(definition string) filter.Schema { return u.s.filterSchema(definition) }

func (u uiReader) Entry(runID string) (core.Summary, bool) { return u.s.index.get(runID) }

func (u uiReader) RunHistory(ctx context.Context, runID string, reveal bool) ([]event.Envelope, []string, error) {
	hist, err := u.s.history(ctx, runID, 0, 0)
	if err != nil || reveal {
		return hist, nil, err
	}
	var secrets []string
	for _, sec := range eventSecrets(hist) {
		if len(sec) >= minScrubbedSecret {
			secrets = append(secrets, sec)
		}
	}
	return redactEvents(hist), secrets, nil
}

func (u uiReader) StepWaits(ctx context.Context, snap *core.Snapshot) []api.StepWait {
	return u.s.control.stepWaits(ctx, snap)
}

func (u uiReader) QueryError(err error) *api.Error { return u.s.apiError(err) }

// uiAuth is the web UI's side of the service's HTTP authentication (httpauth.go): its session
// cookie, and what the middleware found of the caller.
type uiAuth struct{ s *Service }

func (u uiAuth) Enabled() bool { return u.s.auth.enabled() }

func (u uiAuth) SignIn(w http.ResponseWriter, r *http.Request, token string) bool {
	acc, token := u.s.auth.token(token)
	if acc == accessNone {
		return false
	}
	now, ttl := time.Now(), u.s.auth.ttl
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: u.s.auth.newSession(token, now), Path: "/", Expires: now.Add(ttl),
		MaxAge: int(ttl / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	return true
}

func (u uiAuth) SignOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
}

func (u uiAuth) Reveal(r *http.Request) (bool, error) { return reveal(r) }

func (u uiAuth) Token(r *http.Request) string { return callerOf(r).token }

func (u uiAuth) Page(w http.ResponseWriter) (csrf string, session bool) {
	if uw, ok := w.(*uiWriter); ok {
		return uw.csrf, uw.session
	}
	return "", false
}

// overTLS reports whether the browser reached the service over TLS (directly, or through a
// proxy that says so).
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}
