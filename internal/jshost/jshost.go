// Package jshost is the engine's host on JetStream: timers go to the FLOW_TIMERS bucket for the
// scheduler, hook tokens to the create-only FLOW_HOOKS bucket, resume tasks to the FLOW_TASKS
// work queue (deduplicated by "<run>:<seq>"), and run summaries to the FLOW_RUNS index.
package jshost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/flowrun/flow/internal/core"
	"github.com/flowrun/flow/internal/engine"
	"github.com/flowrun/flow/internal/streams"
)

// Host implements engine.Host and engine.Observer. It is safe for concurrent use.
type Host struct {
	js     jetstream.JetStream
	timers jetstream.KeyValue
	hooks  jetstream.KeyValue
	runs   jetstream.KeyValue
	source string
	logger *slog.Logger
}

var (
	_ engine.Host     = (*Host)(nil)
	_ engine.Observer = (*Host)(nil)
)

// New opens the buckets on js. Flow's streams must exist. source is the ce-source of the tasks
// it publishes; logger may be nil.
func New(ctx context.Context, js jetstream.JetStream, source string, logger *slog.Logger) (*Host, error) {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Host{js: js, source: source, logger: logger}
	for name, kv := range map[string]*jetstream.KeyValue{streams.TimersBucket: &h.timers, streams.HooksBucket: &h.hooks, streams.RunsBucket: &h.runs} {
		b, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("opening bucket %s: %w (start `flow dev` or a worker to create Flow's streams)", name, err)
		}
		*kv = b
	}
	return h, nil
}

// TimerKey is the FLOW_TIMERS key of a timer.
func TimerKey(t core.Timer) string { return t.RunID + "." + t.Key() }

// ScheduleTimers implements engine.Host: one entry per timer, overwritten with the same value on
// repair.
func (h *Host) ScheduleTimers(ctx context.Context, ts []core.Timer) error {
	for _, t := range ts {
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if _, err := h.timers.Put(ctx, TimerKey(t), b); err != nil {
			return fmt.Errorf("registering timer %s: %w", TimerKey(t), err)
		}
	}
	return nil
}

type hookRoute struct {
	RunID  string `json:"run_id"`
	HookID string `json:"hook_id"`
}

// RegisterHook implements engine.Host with a create-only entry per token.
func (h *Host) RegisterHook(ctx context.Context, token, runID, hookID string) error {
	want := hookRoute{RunID: runID, HookID: hookID}
	b, err := json.Marshal(want)
	if err != nil {
		return err
	}
	_, err = h.hooks.Create(ctx, token, b)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	got, err := h.lookup(ctx, token)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: routes to hook %q of run %q", engine.ErrTokenTaken, got.HookID, got.RunID)
	}
	return nil
}

// LookupHook implements engine.Host.
func (h *Host) LookupHook(ctx context.Context, token string) (string, string, error) {
	r, err := h.lookup(ctx, token)
	return r.RunID, r.HookID, err
}

func (h *Host) lookup(ctx context.Context, token string) (hookRoute, error) {
	var r hookRoute
	e, err := h.hooks.Get(ctx, token)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return r, fmt.Errorf("%w: no hook has this token", core.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("looking up a hook token: %w", err)
	}
	return r, json.Unmarshal(e.Value(), &r)
}

// TaskType is the ce-type of resume tasks.
const TaskType = "dev.flow.task.resume"

// Resume implements engine.Host: it publishes a resume task, a CloudEvent whose ID
// "<run>:<seq>" is also its Nats-Msg-Id, so tasks for the same state collapse into one.
func (h *Host) Resume(ctx context.Context, t engine.Task) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	id := t.RunID + ":" + strconv.FormatUint(t.Seq, 10)
	msg := nats.NewMsg(streams.TaskSubject(t.Queue, t.RunID))
	msg.Data = body
	msg.Header.Set("ce-specversion", "1.0")
	msg.Header.Set("ce-id", id)
	msg.Header.Set("ce-source", h.source)
	msg.Header.Set("ce-type", TaskType)
	msg.Header.Set("ce-time", time.Now().UTC().Format(time.RFC3339Nano))
	msg.Header.Set("ce-subject", t.RunID)
	msg.Header.Set("ce-datacontenttype", "application/json")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(msg.Header))
	if _, err := h.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("publishing the resume task of run %q: %w", t.RunID, err)
	}
	return nil
}

// RunChanged implements engine.Observer: it writes the run's summary to the runs index.
func (h *Host) RunChanged(ctx context.Context, s core.Summary) {
	b, err := json.Marshal(s)
	if err == nil {
		_, err = h.runs.Put(ctx, s.RunID, b)
	}
	if err != nil {
		h.logger.WarnContext(ctx, "runs index not updated", slog.String("run_id", s.RunID), slog.String("error", err.Error()))
	}
}
