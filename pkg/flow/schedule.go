package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowrun/flow/internal/api"
	"github.com/flowrun/flow/internal/schedule"
	"github.com/flowrun/flow/pkg/event"
)

// Schedules start runs of a definition at the slots of a cron expression in a time zone, or of
// a fixed interval (docs/schedules.md). They live in the FLOW_SCHEDULES bucket, are changed
// through the ingress and fired by the scheduler, exactly once per slot: each run's ID is
// derived from the schedule's name and the slot, and its run.started records both
// (RunStarted.Schedule).

// ScheduleSpec says when a schedule's slots are: a cron expression in a time zone, or an
// interval with an offset, plus jitter.
type ScheduleSpec = schedule.Spec

// Schedule is a schedule as stored: its spec, its start, its policies and its state (paused,
// buffered actions, recent actions, counts).
type Schedule = schedule.Schedule

// ScheduleAction is one action of a schedule: its slot, its kind, its run ID and its outcome.
type ScheduleAction = schedule.Action

// ScheduleDescription is a schedule with its next actions.
type ScheduleDescription = api.ScheduleDescription

// Overlap is what a schedule does with an action that comes while a run it started is active.
type Overlap = schedule.Overlap

// The overlap policies, with Temporal's meanings.
const (
	OverlapSkip           = schedule.Skip
	OverlapBufferOne      = schedule.BufferOne
	OverlapBufferAll      = schedule.BufferAll
	OverlapCancelOther    = schedule.CancelOther
	OverlapTerminateOther = schedule.TerminateOther
	OverlapAllowAll       = schedule.AllowAll
)

// ScheduleConfig describes a schedule for [ScheduleClient.Create] and [ScheduleClient.Update]:
// either Cron (with TZ, default UTC) or Every (with Offset), and the start of its runs.
type ScheduleConfig struct {
	// Cron is a five-field cron expression (minute, hour, day of month, month, day of week;
	// names such as MON-FRI and descriptors such as @daily work), read as wall-clock time in
	// TZ, an IANA zone name.
	Cron string
	TZ   string
	// Every is a fixed interval (at least a second), counted from the Unix epoch plus Offset
	// (at least 0 and shorter than Every): Every 1h with Offset 15m fires at 00:15, 01:15, ...
	// UTC.
	Every  time.Duration
	Offset time.Duration
	// Jitter delays each slot by a pseudo-random amount in [0, Jitter), the same for the same
	// schedule and slot, so that schedules with the same timing do not all fire at once.
	Jitter time.Duration
	// Definition, Queue ("" for the ingress's) and Input (encoded to JSON) start each run.
	Definition string
	Queue      string
	Input      any
	// Overlap defaults to OverlapSkip; CatchupWindow (how late a slot may start after
	// downtime) to one hour.
	Overlap       Overlap
	CatchupWindow time.Duration
	// Paused creates the schedule paused, with Note.
	Paused bool
	Note   string
}

func (o *ScheduleConfig) request(name string) (*api.ScheduleCreateRequest, error) {
	req := &api.ScheduleCreateRequest{Name: name, Definition: o.Definition, Queue: o.Queue, Overlap: o.Overlap,
		Paused: o.Paused, Note: o.Note,
		Spec: schedule.Spec{Cron: o.Cron, TZ: o.TZ, Every: event.Duration(o.Every), Offset: event.Duration(o.Offset), Jitter: event.Duration(o.Jitter)}}
	if o.CatchupWindow != 0 {
		req.CatchupWindow = o.CatchupWindow.String()
	}
	if o.Input != nil {
		in, err := json.Marshal(o.Input)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding the schedule's input: %w", ErrInvalidInput, err)
		}
		req.Input = in
	}
	return req, nil
}

// ScheduleClient creates, reads, changes and deletes schedules, through the ingress. Get one
// with [Client.Schedules]; it shares the client's connection and is safe for concurrent use.
type ScheduleClient struct{ t *transport }

// Schedules returns the client's operations on schedules.
func (c *Client) Schedules() ScheduleClient { return ScheduleClient{t: c.t} }

// Create creates schedule name. Its first slot is the first after now. A bad spec (a cron
// expression, a time zone, an overlap policy) is an error wrapping ErrInvalidInput, a definition
// no live worker serves one wrapping ErrNoWorker, a name taken one wrapping ErrScheduleExists.
func (s ScheduleClient) Create(ctx context.Context, name string, cfg ScheduleConfig) (*ScheduleDescription, error) {
	req, err := cfg.request(name)
	if err != nil {
		return nil, err
	}
	var out ScheduleDescription
	return &out, s.do(ctx, api.ScheduleOpCreate, req, &out)
}

// Update replaces the spec, start and policies of schedule name, keeping its state (its recent
// actions, buffered actions and pause; cfg.Paused pauses it, it never unpauses). The next slot
// is the first of the new spec after the last slot dealt with.
func (s ScheduleClient) Update(ctx context.Context, name string, cfg ScheduleConfig) (*ScheduleDescription, error) {
	req, err := cfg.request(name)
	if err != nil {
		return nil, err
	}
	var out ScheduleDescription
	return &out, s.do(ctx, api.ScheduleOpUpdate, req, &out)
}

// Describe returns schedule name with its next action times, next of them (0 lists 5).
func (s ScheduleClient) Describe(ctx context.Context, name string, next int) (*ScheduleDescription, error) {
	req := api.ScheduleRequest{Name: name, Next: next}
	var out ScheduleDescription
	return &out, s.do(ctx, api.ScheduleOpDescribe, req, &out)
}

// List returns every schedule, sorted by name, each with its next action.
func (s ScheduleClient) List(ctx context.Context) ([]ScheduleDescription, error) {
	var out api.ScheduleList
	if err := s.do(ctx, api.ScheduleOpList, api.ScheduleRequest{}, &out); err != nil {
		return nil, err
	}
	return out.Schedules, nil
}

// Pause pauses schedule name with a note: its slots are recorded as paused, not started, until
// Unpause. Triggers and backfills still act.
func (s ScheduleClient) Pause(ctx context.Context, name, note string) error {
	return s.do(ctx, api.ScheduleOpPause, api.ScheduleRequest{Name: name, Note: note}, nil)
}

// Unpause resumes schedule name, with a note; the slots missed while paused are not caught up.
func (s ScheduleClient) Unpause(ctx context.Context, name, note string) error {
	return s.do(ctx, api.ScheduleOpUnpause, api.ScheduleRequest{Name: name, Note: note}, nil)
}

// TriggerOptions adjust [ScheduleClient.Trigger] and [ScheduleClient.Backfill]. The zero value
// works.
type TriggerOptions struct {
	// Overlap overrides the schedule's overlap policy for these actions.
	Overlap Overlap
	// RequestID makes the request idempotent: a repeat is taken once (the description's
	// Accepted is false). Empty generates one.
	RequestID string
}

// Trigger asks schedule name to act now (its slot: now, to the millisecond), under its overlap
// policy; the scheduler starts the run within moments. opts may be nil.
func (s ScheduleClient) Trigger(ctx context.Context, name string, opts *TriggerOptions) (*ScheduleDescription, error) {
	req := api.ScheduleRequest{Name: name}
	if opts != nil {
		req.Overlap, req.RequestID = opts.Overlap, opts.RequestID
	}
	var out ScheduleDescription
	return &out, s.do(ctx, api.ScheduleOpTrigger, req, &out)
}

// Backfill asks schedule name to act for each of its slots in [start, end), in order, under its
// overlap policy (or opts.Overlap), whatever the catch-up window. The range must be in the past.
// Runs of a backfill have IDs of their own: a range that ran already runs again. opts may be
// nil.
func (s ScheduleClient) Backfill(ctx context.Context, name string, start, end time.Time, opts *TriggerOptions) (*ScheduleDescription, error) {
	req := api.ScheduleRequest{Name: name, Start: start, End: end}
	if opts != nil {
		req.Overlap, req.RequestID = opts.Overlap, opts.RequestID
	}
	var out ScheduleDescription
	return &out, s.do(ctx, api.ScheduleOpBackfill, req, &out)
}

// Delete deletes schedule name. The runs it started are left alone.
func (s ScheduleClient) Delete(ctx context.Context, name string) error {
	return s.do(ctx, api.ScheduleOpDelete, api.ScheduleRequest{Name: name}, nil)
}

// do asks the ingress for schedule operation op; each is idempotent, so it is retried.
func (s ScheduleClient) do(ctx context.Context, op string, req, out any) error {
	return s.t.json(ctx, call{to: ingress, subject: api.ScheduleSubject(op), retry: true}, req, out)
}
