package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/internal/schedule/schedstore"
	"github.com/flowrun/flow/pkg/event"
)

// Schedules (docs/schedules.md, internal/api/schedule.go): the ingress describes and lists the
// entries of FLOW_SCHEDULES, which it reads; it checks each create, update, delete, pause,
// unpause, trigger and backfill, and forwards it to the bucket's one writer, the scheduler's
// schedule runner (owner.go), which also fires them.

// scheduleRoutes adds the HTTP doors of schedules.
func (s *Service) scheduleRoutes(mux *routes) {
	handle := func(pattern, op string, status int) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(w, r) {
				return
			}
			body, e := scheduleBody(r, op)
			if e != nil {
				writeError(w, e)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), inputTimeout)
			defer cancel()
			resp, e := s.scheduleOp(ctx, op, body)
			if e != nil {
				writeError(w, e)
				return
			}
			writeJSON(w, status, resp)
		})
	}
	handle("POST /v1/schedules", api.ScheduleOpCreate, http.StatusCreated)
	handle("GET /v1/schedules", api.ScheduleOpList, http.StatusOK)
	handle("GET /v1/schedules/{name}", api.ScheduleOpDescribe, http.StatusOK)
	handle("PUT /v1/schedules/{name}", api.ScheduleOpUpdate, http.StatusOK)
	handle("DELETE /v1/schedules/{name}", api.ScheduleOpDelete, http.StatusOK)
	handle("POST /v1/schedules/{name}/pause", api.ScheduleOpPause, http.StatusOK)
	handle("POST /v1/schedules/{name}/unpause", api.ScheduleOpUnpause, http.StatusOK)
	handle("POST /v1/schedules/{name}/trigger", api.ScheduleOpTrigger, http.StatusAccepted)
	handle("POST /v1/schedules/{name}/backfill", api.ScheduleOpBackfill, http.StatusAccepted)
}

// scheduleBody returns the JSON request of an HTTP schedule operation: its body, with the name
// of its path, its ?next= and its Idempotency-Key.
func scheduleBody(r *http.Request, op string) ([]byte, *api.IngressError) {
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeTooLarge, Message: fmt.Sprintf("reading the body: %v (the limit is 1 MiB)", err)}
	}
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: fmt.Sprintf("the body is not a JSON object: %v", err)}
		}
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		fields[k] = b
	}
	if name := r.PathValue("name"); name != "" {
		set("name", name)
	}
	if n := r.URL.Query().Get("next"); n != "" {
		v, err := strconv.Atoi(n)
		if err != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("next=%q is not a number", n)}
		}
		set("next", v)
	}
	if key := r.Header.Get(api.HeaderIdempotencyKey); key != "" && (op == api.ScheduleOpTrigger || op == api.ScheduleOpBackfill) {
		if _, ok := fields["request_id"]; !ok {
			set("request_id", key)
		}
	}
	b, _ := json.Marshal(fields)
	return b, nil
}

// onScheduleMsg answers a schedule operation on NATS.
func (s *Service) onScheduleMsg(ctx context.Context, m *nats.Msg) {
	op := strings.TrimPrefix(m.Subject, api.SubjectSchedulePrefix)
	resp, e := s.scheduleOp(ctx, op, m.Data)
	if m.Reply == "" {
		if e != nil {
			s.logger.Warn("a schedule operation published without a reply subject failed", slog.String("subject", m.Subject), slog.String("error", e.Message))
		}
		return
	}
	s.reply(m, "a schedule operation", resp, e)
}

func decodeStrict(data []byte, v any) *api.IngressError {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("the request is not a schedule request: %v", err)}
	}
	return nil
}

// scheduleOp carries out schedule operation op on request data: it reads FLOW_SCHEDULES for a
// description or a listing, and forwards a change to the schedule runner, its one writer.
func (s *Service) scheduleOp(ctx context.Context, op string, data []byte) (any, *api.IngressError) {
	if e := checkUTF8(data, "the request"); e != nil {
		return nil, e
	}
	if op == api.ScheduleOpCreate || op == api.ScheduleOpUpdate {
		var req api.ScheduleCreateRequest
		if e := decodeStrict(data, &req); e != nil {
			return nil, e
		}
		return s.putSchedule(ctx, op, &req)
	}
	var req api.ScheduleRequest
	if e := decodeStrict(data, &req); e != nil {
		return nil, e
	}
	switch op {
	case api.ScheduleOpList, api.ScheduleOpDescribe:
	case api.ScheduleOpDelete, api.ScheduleOpPause, api.ScheduleOpUnpause, api.ScheduleOpTrigger, api.ScheduleOpBackfill:
		var d api.ScheduleDescription
		if e := s.askScheduler(ctx, api.SchedulerScheduleSubject(op), "schedule runner", req, &d); e != nil {
			return nil, e
		}
		return &d, nil
	default:
		return nil, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("no schedule operation %q; the operations are create, update, describe, list, pause, unpause, trigger, backfill and delete", op)}
	}
	st, err := schedstore.Open(ctx, s.js)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("%v; retry", err)}
	}
	now := time.Now()
	if op == api.ScheduleOpList {
		return listSchedules(ctx, st, now)
	}
	sch, _, t, e := st.Get(ctx, req.Name)
	if e != nil {
		return nil, e
	}
	return schedstore.Describe(sch, t, now, req.Next), nil
}

// putSchedule checks a create, or an update (of the spec, start and policies of a schedule,
// keeping its state), and forwards it to the schedule runner.
func (s *Service) putSchedule(ctx context.Context, op string, req *api.ScheduleCreateRequest) (*api.ScheduleDescription, *api.IngressError) {
	if err := schedule.ValidateName(req.Name); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidName, Message: trimFlow(err)}
	}
	sch := schedule.Schedule{Name: req.Name, Spec: req.Spec, Definition: req.Definition, Queue: req.Queue, Input: req.Input, Overlap: req.Overlap}
	if req.CatchupWindow != "" {
		d, err := time.ParseDuration(req.CatchupWindow)
		if err != nil || d < 0 {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: fmt.Sprintf("catch-up window %q is not a duration such as 10m or 24h", req.CatchupWindow)}
		}
		sch.CatchupWindow = event.Duration(d)
	}
	if len(sch.Input) > 0 {
		var v any
		if err := json.Unmarshal(sch.Input, &v); err != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidJSON, Message: "the schedule's input is not valid JSON; give a JSON value such as '{\"region\":\"eu\"}'"}
		}
		sch.Input, _ = json.Marshal(v)
	}
	if _, err := sch.Validate(); err != nil {
		return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
	}
	queue := sch.Queue
	if queue == "" {
		queue = s.cfg.Queue
	}
	if _, e := s.defs.require(ctx, queue, sch.Definition); e != nil {
		if e.Code == api.CodeNoWorker {
			e.Message = "schedule " + strconv.Quote(sch.Name) + ": " + e.Message
		}
		return nil, e
	}
	var d api.ScheduleDescription
	if e := s.askScheduler(ctx, api.SchedulerScheduleSubject(op), "schedule runner", api.SchedulePut{Schedule: sch, Paused: req.Paused, Note: req.Note}, &d); e != nil {
		return nil, e
	}
	return &d, nil
}

// listSchedules lists every schedule of st, sorted by name.
func listSchedules(ctx context.Context, st *schedstore.Store, now time.Time) (*api.ScheduleList, *api.IngressError) {
	names, err := st.Names(ctx)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("listing schedules: %v; retry", err)}
	}
	slices.Sort(names)
	out := &api.ScheduleList{Schedules: []api.ScheduleDescription{}}
	for _, name := range names {
		sch, _, t, e := st.Get(ctx, name)
		if e != nil {
			if e.Code == api.CodeScheduleNotFound {
				continue // deleted meanwhile
			}
			return nil, e
		}
		out.Schedules = append(out.Schedules, *schedstore.Describe(sch, t, now, 1))
	}
	return out, nil
}
