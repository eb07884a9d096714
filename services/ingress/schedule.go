package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/internal/streams"
	"github.com/flowrun/flow/pkg/event"
)

// Schedules (docs/schedules.md, internal/api/schedule.go): the ingress creates, changes, lists
// and deletes the entries of FLOW_SCHEDULES, each change a compare-and-set of the entry it read,
// so that it never overwrites what the scheduler stored meanwhile (it reads again and repeats).
// The scheduler fires them.

// scheduleAttempts bounds the compare-and-set rounds of one operation.
const scheduleAttempts = 16

// scheduleRoutes adds the HTTP doors of schedules.
func (s *Service) scheduleRoutes(mux *http.ServeMux) {
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

// scheduleOp carries out schedule operation op on request data.
func (s *Service) scheduleOp(ctx context.Context, op string, data []byte) (any, *api.IngressError) {
	kv, err := s.js.KeyValue(ctx, streams.SchedulesBucket)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("cannot open %s: %v; retry", streams.SchedulesBucket, err)}
	}
	if op == api.ScheduleOpCreate || op == api.ScheduleOpUpdate {
		var req api.ScheduleCreateRequest
		if e := decodeStrict(data, &req); e != nil {
			return nil, e
		}
		return s.putSchedule(ctx, kv, op, &req)
	}
	var req api.ScheduleRequest
	if e := decodeStrict(data, &req); e != nil {
		return nil, e
	}
	now := time.Now()
	switch op {
	case api.ScheduleOpList:
		return s.listSchedules(ctx, kv, now)
	case api.ScheduleOpDescribe:
		sch, _, t, e := getSchedule(ctx, kv, req.Name)
		if e != nil {
			return nil, e
		}
		return describe(sch, t, now, req.Next), nil
	case api.ScheduleOpDelete:
		sch, rev, t, e := getSchedule(ctx, kv, req.Name)
		if e != nil {
			return nil, e
		}
		if err := kv.Delete(ctx, req.Name, jetstream.LastRevision(rev)); err != nil {
			return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("deleting schedule %q: %v; retry", req.Name, err)}
		}
		return describe(sch, t, now, 0), nil
	case api.ScheduleOpPause, api.ScheduleOpUnpause, api.ScheduleOpTrigger, api.ScheduleOpBackfill:
	default:
		return nil, &api.IngressError{Code: api.CodeRouteNotFound, Message: fmt.Sprintf("no schedule operation %q; the operations are create, update, describe, list, pause, unpause, trigger, backfill and delete", op)}
	}
	if (op == api.ScheduleOpTrigger || op == api.ScheduleOpBackfill) && req.RequestID == "" {
		req.RequestID = nuid.Next()
	}
	accepted := true
	var triggerRun string
	d, e := s.changeSchedule(ctx, kv, req.Name, func(sch *schedule.Schedule, t *schedule.Timing) error {
		var err error
		switch op {
		case api.ScheduleOpPause:
			err = sch.Pause(req.Note, now)
		case api.ScheduleOpUnpause:
			err = sch.Unpause(t, req.Note, now)
		case api.ScheduleOpTrigger:
			accepted, err = sch.Trigger(req.RequestID, req.Overlap, now)
			if accepted {
				last := sch.State.Requests[len(sch.State.Requests)-1]
				triggerRun = schedule.RunID(sch.Name, event.ScheduleTrigger, last.At, last.ID)
			}
		case api.ScheduleOpBackfill:
			accepted, err = sch.Backfill(t, req.RequestID, req.Start, req.End, req.Overlap, now)
		}
		return err
	}, req.Next, &accepted)
	if e != nil {
		return nil, e
	}
	if op == api.ScheduleOpTrigger || op == api.ScheduleOpBackfill {
		d.RequestID, d.TriggerRunID = req.RequestID, triggerRun
	}
	return d, nil
}

// getSchedule reads schedule name.
func getSchedule(ctx context.Context, kv jetstream.KeyValue, name string) (*schedule.Schedule, uint64, *schedule.Timing, *api.IngressError) {
	if err := schedule.ValidateName(name); err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeInvalidName, Message: trimFlow(err)}
	}
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, nil, &api.IngressError{Code: api.CodeScheduleNotFound, Message: fmt.Sprintf("schedule %q does not exist; list schedules with `flow schedule list`", name)}
	}
	if err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("reading schedule %q: %v; retry", name, err)}
	}
	var sch schedule.Schedule
	if err := json.Unmarshal(e.Value(), &sch); err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("schedule %q is stored malformed: %v", name, err)}
	}
	t, err := sch.Validate()
	if err != nil {
		return nil, 0, nil, &api.IngressError{Code: api.CodeIngressInternal, Message: fmt.Sprintf("schedule %q is stored invalid: %v", name, err)}
	}
	return &sch, e.Revision(), t, nil
}

// describe returns sch's description with its next n actions.
func describe(sch *schedule.Schedule, t *schedule.Timing, now time.Time, n int) *api.ScheduleDescription {
	if n <= 0 {
		n = api.DefaultScheduleNext
	}
	n = min(n, api.MaxScheduleNext)
	return &api.ScheduleDescription{Schedule: *sch, Next: sch.NextActions(t, now, n)}
}

// changeSchedule applies change to schedule name by compare-and-set, reading it again after a
// lost race.
func (s *Service) changeSchedule(ctx context.Context, kv jetstream.KeyValue, name string, change func(*schedule.Schedule, *schedule.Timing) error,
	next int, accepted *bool) (*api.ScheduleDescription, *api.IngressError) {
	for range scheduleAttempts {
		sch, rev, t, e := getSchedule(ctx, kv, name)
		if e != nil {
			return nil, e
		}
		if err := change(sch, t); err != nil {
			return nil, &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
		}
		if !*accepted {
			// A repeated trigger or backfill: nothing to write.
			return describe(sch, t, time.Now(), next), nil
		}
		data, err := json.Marshal(sch)
		if err != nil {
			return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
		}
		if _, err := kv.Update(ctx, name, data, rev); err != nil {
			if isWrongRevision(err) {
				continue
			}
			return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("storing schedule %q: %v; retry", name, err)}
		}
		d := describe(sch, t, time.Now(), next)
		d.Accepted = *accepted
		return d, nil
	}
	return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("schedule %q kept changing under %d attempts; retry", name, scheduleAttempts)}
}

// isWrongRevision reports a compare-and-set that lost.
func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// putSchedule creates a schedule, or (update) changes the spec, start and policies of one,
// keeping its state.
func (s *Service) putSchedule(ctx context.Context, kv jetstream.KeyValue, op string, req *api.ScheduleCreateRequest) (*api.ScheduleDescription, *api.IngressError) {
	bad := func(err error) *api.IngressError {
		return &api.IngressError{Code: api.CodeInvalidRequest, Message: trimFlow(err)}
	}
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
		return nil, bad(err)
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
	now := time.Now()
	if op == api.ScheduleOpCreate {
		sch.State.Paused, sch.State.Note = req.Paused, req.Note
		created, t, err := schedule.New(sch, now)
		if err != nil {
			return nil, bad(err)
		}
		data, err := json.Marshal(created)
		if err != nil {
			return nil, &api.IngressError{Code: api.CodeIngressInternal, Message: err.Error()}
		}
		if _, err := kv.Create(ctx, sch.Name, data); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				return nil, &api.IngressError{Code: api.CodeScheduleExists, Message: fmt.Sprintf("schedule %q exists; change it with `flow schedule update`, or delete it first", sch.Name)}
			}
			return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("creating schedule %q: %v; retry", sch.Name, err)}
		}
		return describe(created, t, now, 0), nil
	}
	accepted := true // an update always writes
	d, e := s.changeSchedule(ctx, kv, sch.Name, func(cur *schedule.Schedule, _ *schedule.Timing) error {
		cur.Spec, cur.Definition, cur.Queue, cur.Input, cur.Overlap, cur.CatchupWindow = sch.Spec, sch.Definition, sch.Queue, sch.Input, sch.Overlap, sch.CatchupWindow
		if req.Paused && !cur.State.Paused {
			cur.State.Paused, cur.State.Note = true, req.Note
		}
		cur.State.UpdatedAt = now.UTC()
		_, err := cur.Validate()
		return err
	}, 0, &accepted)
	if d != nil {
		d.Accepted = false
	}
	return d, e
}

// listSchedules lists every schedule, sorted by name.
func (s *Service) listSchedules(ctx context.Context, kv jetstream.KeyValue, now time.Time) (*api.ScheduleList, *api.IngressError) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, &api.IngressError{Code: api.CodeIngressBusy, Message: fmt.Sprintf("listing schedules: %v; retry", err)}
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, k)
	}
	slices.Sort(names)
	out := &api.ScheduleList{Schedules: []api.ScheduleDescription{}}
	for _, name := range names {
		sch, _, t, e := getSchedule(ctx, kv, name)
		if e != nil {
			if e.Code == api.CodeScheduleNotFound {
				continue // deleted meanwhile
			}
			return nil, e
		}
		out.Schedules = append(out.Schedules, *describe(sch, t, now, 1))
	}
	return out, nil
}
