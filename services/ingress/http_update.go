package ingress

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/httpserve"
)

// updateRoutes adds the HTTP doors of updates and of the starts that carry an input (see
// internal/api/update.go).
func (s *Service) updateRoutes(mux *routes) {
	post := func(pattern string, kind api.InputKind, names func(*http.Request, *input)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(w, r) {
				return
			}
			wait, ok := waitOf(w, r)
			if !ok {
				return
			}
			resp := s.applyHTTP(w, r, kind, names)
			if resp == nil {
				return
			}
			if wait > 0 && kind != api.KindSignalWithStart {
				s.writeUpdateState(w, r, resp.RunID, resp.DeliveryID, wait)
				return
			}
			status := http.StatusAccepted
			if resp.Created {
				status = http.StatusCreated
			}
			writeJSON(w, status, resp)
		})
	}
	post("POST /v1/runs/{run}/updates/{name}", api.KindUpdate, func(r *http.Request, in *input) {
		in.runID, in.name = r.PathValue("run"), r.PathValue("name")
		if id := r.URL.Query().Get("update_id"); id != "" {
			r.Header.Set(api.HeaderIdempotencyKey, id)
		}
	})
	post("POST /v1/workflows/{definition}/update-with-start/{name}", api.KindUpdateWithStart, func(r *http.Request, in *input) {
		in.definition, in.name = r.PathValue("definition"), r.PathValue("name")
	})
	post("POST /v1/workflows/{definition}/signal-with-start/{name}", api.KindSignalWithStart, func(r *http.Request, in *input) {
		in.definition, in.name = r.PathValue("definition"), r.PathValue("name")
	})
	mux.HandleFunc("GET /v1/runs/{run}/updates/{update_id}", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(w, r) {
			return
		}
		if wait, ok := waitOf(w, r); ok {
			s.writeUpdateState(w, r, r.PathValue("run"), r.PathValue("update_id"), wait)
		}
	})
}

// writeUpdateState answers the state of update id of run runID, once it has an outcome or wait
// has passed.
func (s *Service) writeUpdateState(w http.ResponseWriter, r *http.Request, runID, id string, wait time.Duration) {
	st, e := s.updateState(r.Context(), runID, id, wait)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// waitOf reads ?wait= (waitParam) and gives a request that waits (a long poll) the time to
// apply its input, wait and answer, beyond the server's write timeout (httpserve.Extend). A
// malformed ?wait= is answered on w, and ok is false.
func waitOf(w http.ResponseWriter, r *http.Request) (wait time.Duration, ok bool) {
	wait, e := waitParam(r)
	if e != nil {
		writeError(w, e)
		return 0, false
	}
	if wait > 0 {
		_ = httpserve.Extend(w, inputTimeout+wait+15*time.Second)
	}
	return wait, true
}

// waitParam reads ?wait=: "true" waits api.DefaultAwait, a duration ("30s") that long (at most
// api.MaxAwait); absent or "false" does not wait.
func waitParam(r *http.Request) (time.Duration, *api.IngressError) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	if b, err := strconv.ParseBool(v); err == nil {
		if b {
			return api.DefaultAwait, nil
		}
		return 0, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return min(d, api.MaxAwait), nil
	}
	return 0, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("wait=%q is neither true, false nor a duration such as 30s", v)}
}
