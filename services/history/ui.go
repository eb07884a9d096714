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
//	POST /ui/runs/{id}/signal       {"name": ..., "payload": <JSON>} (or a form): forwarded to
//	                                the ingress over NATS
//	POST /ui/runs/{id}/cancel       {"reason": ...} (or a form): forwarded to the ingress
//	GET  /ui/schedules[/{name}]     the schedules, and one schedule (ui_schedule.go)
//	GET  /ui/batches[/{id}]         the batch jobs and a job's report (ui_batch.go)
//	GET  /ui/static/...             the stylesheet and script
//
// ?fragment=rows (list) and ?fragment=view (run) return only the part the script swaps in.
// The POSTs are refused when the browser says they come from another origin (CSRF).

//go:embed ui/templates/*.html ui/static/*
var uiFiles embed.FS

// uiTemplates holds the parsed pages.
var uiTemplates = template.Must(template.New("ui").Funcs(uiFuncs).ParseFS(uiFiles, "ui/templates/*.html"))

// uiActionTimeout bounds one signal or cancel forwarded to the ingress.
const uiActionTimeout = 15 * time.Second

// mountUI adds the web UI's routes to mux.
func (s *Service) mountUI(mux *http.ServeMux) {
	client, err := flow.NewClient(context.Background(), s.nc, &flow.ClientOptions{Logger: s.logger})
	if err != nil {
		s.logger.Error("the web UI cannot send inputs", slog.String("error", err.Error()))
	}
	static, _ := fs.Sub(uiFiles, "ui/static")
	files := http.StripPrefix("/ui/static/", http.FileServerFS(static))
	csrf := http.NewCrossOriginProtection()
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
	act := &uiActions{s: s, client: client}
	mux.Handle("POST /ui/runs/{id}/signal", csrf.Handler(http.HandlerFunc(act.signal)))
	mux.Handle("POST /ui/runs/{id}/cancel", csrf.Handler(http.HandlerFunc(act.cancel)))
	s.mountScheduleUI(mux, client) // ui_schedule.go
	batches := &uiBatches{s: s, client: client}
	mux.HandleFunc("GET /ui/batches", batches.list)
	mux.HandleFunc("GET /ui/batches/{id}", batches.job)
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.uiError(w, http.StatusNotFound, "Page not found", fmt.Sprintf("%s %s is not a page of the web UI; start from the runs list.", r.Method, r.URL.Path))
	})
}

// uiRender writes template name with data, as a page (status) or a fragment.
func (s *Service) uiRender(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&b, name, data); err != nil {
		s.logger.Error("rendering a web UI page failed", slog.String("template", name), slog.String("error", err.Error()))
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
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

// errNoClient is returned by actions when the service could not make a client.
var errNoClient = errors.New("the history service has no client to forward inputs to the ingress; see its log")
