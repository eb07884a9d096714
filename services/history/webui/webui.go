// Package webui is the history service's web UI, on top of its read API (Reader) and of the
// ingress's HTTP API for actions; the history service constructs it and mounts its routes.
package webui

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/filter"
	"github.com/flowrun/flow/pkg/event"
	"github.com/flowrun/flow/pkg/flow"
)

// The web UI: server-rendered pages over the same queries as the JSON API, with a little
// embedded JavaScript that steps through a run's history, follows it live (the /watch SSE) and
// sends signals and cancels. Everything it needs is in the binary; it works offline.
//
//	GET  /                          redirects to /ui/
//	GET  /ui/                       the runs list: ?status=&definition=&prefix=&limit=&cursor=
//	GET  /ui/runs/{id}              a run: its snapshot at ?at=SEQ (default: the latest), the
//	                                timeline, the diagnosis of a blocked run
//	GET  /ui/login, POST /ui/login  the sign-in page, when tokens are configured (login.go)
//	POST /ui/logout                 signs out
//	POST /ui/runs/{id}/signal       {"name": ..., "payload": <JSON>} (or a form): forwarded to
//	                                the ingress's HTTP API with the caller's token
//	POST /ui/runs/{id}/cancel       {"reason": ...} (or a form): forwarded to the ingress
//	GET  /ui/schedules[/{name}]     the schedules, and one schedule (schedule.go)
//	GET  /ui/batches[/{id}]         the batch jobs and a job's report (batch.go)
//	POST /ui/runs/{id}/pause        {"reason": ...} (or a form): forwarded to the ingress
//	POST /ui/runs/{id}/unpause      {"reason": ...} (or a form): forwarded to the ingress
//	GET  /ui/static/...             the stylesheet and script
//
// ?fragment=rows (list) and ?fragment=view (run) return only the part the script swaps in.
// Who may see and do what is checked before, by the history service's middleware: the POSTs
// are refused from another origin, without the page's CSRF token, and from a read-only token.

//go:embed ui/templates/*.html ui/static/*
var uiFiles embed.FS

// uiTemplates holds the parsed pages.
var uiTemplates = template.Must(template.New("ui").Funcs(uiFuncs).ParseFS(uiFiles, "ui/templates/*.html"))

// uiActionTimeout bounds one action forwarded to the ingress, and one read of schedules or
// batch jobs.
const uiActionTimeout = 15 * time.Second

// Reader is the history service's read API, as the pages show it. Its methods are safe for
// concurrent use; their errors are the read API's (see QueryError).
type Reader interface {
	// ListRequest reads a listing's filters from a request's query string, as the JSON API does.
	ListRequest(r *http.Request) (api.ListRequest, error)
	// ListRuns answers a listing of the runs index as the JSON API does, keeping only the runs
	// whose ID starts with prefix ("" keeps all).
	ListRuns(req api.ListRequest, prefix string) (api.ListResponse, error)
	// Statuses are the statuses a listing may filter on, in the order the filter offers them.
	Statuses() []core.Status
	// Definitions returns the definitions workers serve and those of indexed runs, unsorted.
	Definitions() []string
	// FilterSchema returns the search attributes a filter of the runs of definition may name
	// besides the built-in fields.
	FilterSchema(definition string) filter.Schema
	// Entry returns run runID's runs index entry.
	Entry(runID string) (core.Summary, bool)
	// RunHistory returns run runID's whole history. Unless reveal, its secrets (the seed, hook
	// tokens) are redacted, and secrets lists the texts to replace wherever they appear on the
	// page.
	RunHistory(ctx context.Context, runID string, reveal bool) (hist []event.Envelope, secrets []string, err error)
	// StepWaits returns the attempts of run s (its latest snapshot) waiting for a slot of their
	// step's limit, now.
	StepWaits(ctx context.Context, s *core.Snapshot) []api.StepWait
	// QueryError turns a read's error into the API's error, its code an HTTP status.
	QueryError(err error) *api.Error
}

// Jobs reads schedules and batch jobs, as `flow schedule` and `flow batch` do (a flow.Client
// over NATS satisfies it).
type Jobs interface {
	ListSchedules(ctx context.Context) ([]flow.ScheduleDescription, error)
	DescribeSchedule(ctx context.Context, name string, recent int) (*flow.ScheduleDescription, error)
	Batches(ctx context.Context, limit int, states ...flow.BatchState) ([]flow.BatchJob, error)
	Batch(ctx context.Context, id string) (*flow.BatchJob, error)
}

// Auth is the caller's side of the service's HTTP authentication, which runs before every
// page (the service's middleware): the sign-in, what a page shows of the caller, and what the
// caller may do.
type Auth interface {
	// Enabled reports whether tokens are configured: without, there is nothing to sign in to.
	Enabled() bool
	// SignIn sets the session cookie of token on w and reports true, or reports false for a
	// token that is not accepted.
	SignIn(w http.ResponseWriter, r *http.Request, token string) bool
	// SignOut clears the session cookie.
	SignOut(w http.ResponseWriter, r *http.Request)
	// Reveal reports whether r asks for a run's secrets (?reveal=secrets), refusing with an
	// *api.Error a caller who may not see them.
	Reveal(r *http.Request) (bool, error)
	// Token returns the caller's bearer token ("" for none), which actions forward.
	Token(r *http.Request) string
	// Page returns what a page shows of the caller the middleware passed w for: the CSRF token
	// of its forms, and whether they signed in (for the sign-out button).
	Page(w http.ResponseWriter) (csrf string, session bool)
}

// Config configures the web UI.
type Config struct {
	Reader Reader
	Auth   Auth
	// Jobs reads schedules and batch jobs; nil when the service has no client, which the
	// schedules and batch pages say.
	Jobs Jobs
	// IngressURL returns the ingress's base URL, to which the actions are forwarded; nil turns
	// the actions off.
	IngressURL func() string
	Logger     *slog.Logger
}

// UI is the web UI: its pages, actions and sign-in, mounted on the history service's mux.
type UI struct {
	reader  Reader
	auth    Auth
	jobs    Jobs
	ingress func() string
	logger  *slog.Logger
}

// New returns the web UI of cfg.
func New(cfg Config) *UI {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &UI{reader: cfg.Reader, auth: cfg.Auth, jobs: cfg.Jobs, ingress: cfg.IngressURL, logger: logger}
}

// Mount adds the web UI's routes to mux.
func (s *UI) Mount(mux *http.ServeMux) {
	static, _ := fs.Sub(uiFiles, "ui/static")
	files := http.StripPrefix("/ui/static/", http.FileServerFS(static))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/static/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /ui/{$}", s.uiRuns)
	mux.HandleFunc("GET /ui/runs/{id}", s.uiRun)
	mux.HandleFunc("GET /ui/login", s.uiLoginForm)
	mux.HandleFunc("POST /ui/login", s.uiLogin)
	mux.HandleFunc("POST /ui/logout", s.uiLogout)
	act := &uiActions{s: s, http: &http.Client{Timeout: uiActionTimeout}, ingress: func() string { return "" }}
	if s.ingress != nil {
		act.ingress = s.ingress
	}
	mux.HandleFunc("POST /ui/runs/{id}/signal", act.signal)
	mux.HandleFunc("POST /ui/runs/{id}/cancel", act.cancel)
	s.mountScheduleUI(mux) // schedule.go
	batches := &uiBatches{s: s}
	mux.HandleFunc("GET /ui/batches", batches.list)
	mux.HandleFunc("GET /ui/batches/{id}", batches.job)
	mux.HandleFunc("POST /ui/runs/{id}/pause", act.pause)
	mux.HandleFunc("POST /ui/runs/{id}/unpause", act.unpause)
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.uiError(w, http.StatusNotFound, "Page not found", fmt.Sprintf("%s %s is not a page of the web UI; start from the runs list.", r.Method, r.URL.Path))
	})
}

// uiRender writes template name with data, as a page (status) or a fragment.
func (s *UI) uiRender(w http.ResponseWriter, status int, name string, data any) {
	s.uiRenderScrubbed(w, status, name, data, nil)
}

// uiRenderScrubbed is uiRender with every occurrence of secrets replaced (Reader.RunHistory).
// It fills in the caller's CSRF token and sign-out button (Auth.Page).
func (s *UI) uiRenderScrubbed(w http.ResponseWriter, status int, name string, data any, secrets []string) {
	var b bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&b, name, data); err != nil {
		s.logger.Error("rendering a web UI page failed", slog.String("template", name), slog.String("error", err.Error()))
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	page := scrub(b.Bytes(), secrets)
	csrf, session := s.auth.Page(w)
	signout := ""
	if session {
		signout = `<form method="post" action="/ui/logout" class="signout"><button type="submit" id="signout">Sign out</button></form>`
	}
	page = bytes.ReplaceAll(page, []byte("__FLOW_CSRF__"), []byte(csrf))
	page = bytes.Replace(page, []byte("__FLOW_SIGNOUT__"), []byte(signout), 1)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(status)
	_, _ = w.Write(page)
}

// uiErrorPage is the data of the error page.
type uiErrorPage struct {
	Title   string
	Status  int
	Message string
}

// uiError renders the error page with status.
func (s *UI) uiError(w http.ResponseWriter, status int, title, message string) {
	s.uiRender(w, status, "error.html", uiErrorPage{Title: title, Status: status, Message: message})
}

// uiQueryError renders a query's error as a page, with the status its code maps to.
func (s *UI) uiQueryError(w http.ResponseWriter, err error) {
	e := s.reader.QueryError(err)
	status, _ := strconv.Atoi(string(e.Code))
	if status == 0 {
		status = http.StatusInternalServerError
	}
	title := map[int]string{http.StatusBadRequest: "Bad request", http.StatusNotFound: "Not found",
		http.StatusConflict: "Conflict", http.StatusLocked: "Run damaged"}[status]
	if title == "" {
		title = http.StatusText(status)
	}
	s.uiError(w, status, title, e.Message)
}

// uiSeq reads the optional ?at= sequence; 0 means the latest.
func uiSeq(r *http.Request) (uint64, error) {
	v := strings.TrimSpace(r.URL.Query().Get("at"))
	if v == "" || v == "latest" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, &api.Error{Code: api.CodeInvalid, Message: fmt.Sprintf("at must be a sequence number from 1 up (or \"latest\"), got %q", v)}
	}
	return n, nil
}

// errNoClient is returned by the schedule pages when the service could not make a client.
var errNoClient = errors.New("the history service has no client to read schedules; see its log")

// scrub replaces every occurrence in b of a secret (Reader.RunHistory) by api.Redacted. b may
// be modified.
func scrub(b []byte, secrets []string) []byte {
	for _, sec := range secrets {
		if sec != "" && bytes.Contains(b, []byte(sec)) {
			b = bytes.ReplaceAll(b, []byte(sec), []byte(api.Redacted))
		}
	}
	return b
}
