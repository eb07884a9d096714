package history

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
//	GET  /ui/login, POST /ui/login  the sign-in page, when tokens are configured (ui_login.go)
//	POST /ui/logout                 signs out
//	POST /ui/runs/{id}/signal       {"name": ..., "payload": <JSON>} (or a form): forwarded to
//	                                the ingress's HTTP API with the caller's token
//	POST /ui/runs/{id}/cancel       {"reason": ...} (or a form): forwarded to the ingress
//	GET  /ui/schedules[/{name}]     the schedules, and one schedule (ui_schedule.go)
//	GET  /ui/batches[/{id}]         the batch jobs and a job's report (ui_batch.go)
//	POST /ui/runs/{id}/pause        {"reason": ...} (or a form): forwarded to the ingress
//	POST /ui/runs/{id}/unpause      {"reason": ...} (or a form): forwarded to the ingress
//	GET  /ui/static/...             the stylesheet and script
//
// ?fragment=rows (list) and ?fragment=view (run) return only the part the script swaps in.
// Who may see and do what is checked before (httpauth.go): the POSTs are refused from another
// origin, without the page's CSRF token, and from a read-only token.

//go:embed ui/templates/*.html ui/static/*
var uiFiles embed.FS

// uiTemplates holds the parsed pages.
var uiTemplates = template.Must(template.New("ui").Funcs(uiFuncs).ParseFS(uiFiles, "ui/templates/*.html"))

// uiActionTimeout bounds one action forwarded to the ingress.
const uiActionTimeout = 15 * time.Second

// mountUI adds the web UI's routes to mux.
func (s *Service) mountUI(mux *http.ServeMux) {
	// The schedules and batch pages read through a client (over NATS).
	client, err := flow.NewClient(context.Background(), s.nc, &flow.ClientOptions{Logger: s.logger})
	if err != nil {
		s.logger.Error("the web UI cannot list schedules and batch jobs", slog.String("error", err.Error()))
	}
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
	switch {
	case s.cfg.IngressURLOf != nil:
		act.ingress = s.cfg.IngressURLOf
	case s.cfg.IngressURL != "off":
		act.ingress = func() string { return s.cfg.IngressURL }
	}
	mux.HandleFunc("POST /ui/runs/{id}/signal", act.signal)
	mux.HandleFunc("POST /ui/runs/{id}/cancel", act.cancel)
	s.mountScheduleUI(mux, client) // ui_schedule.go
	batches := &uiBatches{s: s, client: client}
	mux.HandleFunc("GET /ui/batches", batches.list)
	mux.HandleFunc("GET /ui/batches/{id}", batches.job)
	mux.HandleFunc("POST /ui/runs/{id}/pause", act.pause)
	mux.HandleFunc("POST /ui/runs/{id}/unpause", act.unpause)
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.uiError(w, http.StatusNotFound, "Page not found", fmt.Sprintf("%s %s is not a page of the web UI; start from the runs list.", r.Method, r.URL.Path))
	})
}

// uiRender writes template name with data, as a page (status) or a fragment.
func (s *Service) uiRender(w http.ResponseWriter, status int, name string, data any) {
	s.uiRenderScrubbed(w, status, name, data, nil)
}

// uiRenderScrubbed is uiRender with every occurrence of secrets replaced (redact.go). It fills
// in the caller's CSRF token and sign-out button (httpauth.go).
func (s *Service) uiRenderScrubbed(w http.ResponseWriter, status int, name string, data any, secrets []string) {
	var b bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&b, name, data); err != nil {
		s.logger.Error("rendering a web UI page failed", slog.String("template", name), slog.String("error", err.Error()))
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	page := scrub(b.Bytes(), secrets)
	csrf, signout := "", ""
	if uw, ok := w.(*uiWriter); ok {
		csrf = uw.csrf
		if uw.session {
			signout = `<form method="post" action="/ui/logout" class="signout"><button type="submit" id="signout">Sign out</button></form>`
		}
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
func (s *Service) uiError(w http.ResponseWriter, status int, title, message string) {
	s.uiRender(w, status, "error.html", uiErrorPage{Title: title, Status: status, Message: message})
}

// uiQueryError renders a query's error as a page, with the status its code maps to.
func (s *Service) uiQueryError(w http.ResponseWriter, err error) {
	e := s.apiError(err)
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
