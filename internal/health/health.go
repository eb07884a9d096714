// Package health answers the probes every Flow service serves on its HTTP listener:
//
//	GET /healthz  liveness: 200 {"status":"ok"} while the process serves HTTP
//	GET /readyz   readiness: 200 {"ready":true} when the service's check passes, else
//	              503 {"ready":false,"reason":"..."}
//	GET /metrics  the process's metrics, Prometheus text format (telemetry.MetricsHandler)
//
// A service is ready once its Start has finished, its NATS connection is up and the consumers
// or subscriptions it serves exist; it is not ready from the moment its Stop begins. Liveness
// says nothing about NATS: a NATS outage makes a service unready, not dead.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/telemetry"
)

// CheckTimeout bounds one readiness check.
const CheckTimeout = 2 * time.Second

// Check reports why a service is not ready, or nil when it is.
type Check func(ctx context.Context) error

// Live answers GET /healthz: 200 with {"status":"ok"} and the fields of extra, if any.
func Live(extra func() map[string]any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		body := map[string]any{}
		if extra != nil {
			body = extra()
		}
		body["status"] = "ok"
		writeJSON(w, http.StatusOK, body)
	})
}

// Ready answers GET /readyz: 200 {"ready":true} when check returns nil within CheckTimeout,
// else 503 {"ready":false,"reason":<the error>}.
func Ready(check Check) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), CheckTimeout)
		defer cancel()
		if err := check(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ready": true})
	})
}

// Mount adds GET /readyz (Ready(check)) and GET /metrics to mux; the service mounts its own
// GET /healthz (Live, or a richer one that is as unconditional).
func Mount(mux *http.ServeMux, check Check) {
	mux.Handle("GET /readyz", Ready(check))
	mux.Handle("GET /metrics", telemetry.MetricsHandler())
}

// Handler is the three routes alone, for a service whose listener serves nothing else.
func Handler(check Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", Live(nil))
	Mount(mux, check)
	return mux
}

// State is a service's lifecycle as readiness sees it: not ready before Started, nor after
// Stopping. The zero value is a service that has not started.
type State struct {
	started, stopping atomic.Bool
}

// Started marks the end of a successful Start.
func (s *State) Started() { s.started.Store(true) }

// Stopping marks the beginning of Stop; it is final.
func (s *State) Stopping() { s.stopping.Store(true) }

// Err is nil while the service is between Started and Stopping, else why not.
func (s *State) Err() error {
	switch {
	case s.stopping.Load():
		return errors.New("stopping")
	case !s.started.Load():
		return errors.New("starting")
	}
	return nil
}

// NATS is nil while nc is connected, else its status.
func NATS(nc *nats.Conn) error {
	if nc == nil {
		return errors.New("no NATS connection yet")
	}
	if st := nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS connection %s", st)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
